"""Tasks for Python users: ``App``, ``@app.task``, ``task.send()``, worker processes.

See :mod:`disquette.tasks.app` (the API), :mod:`disquette.client.task_body` (the job
body, versioned, for producers in any language), :mod:`disquette.tasks.process`
(the supervisor behind ``disquette worker module:app``), and docs/tasks.md.
"""

from disquette.client.task_body import BodyError, Message, decode, encode
from disquette.tasks.app import App, Middleware, Task
from disquette.tasks.limits import TimeLimitExceeded

__all__ = [
    "App",
    "BodyError",
    "Message",
    "Middleware",
    "Task",
    "TimeLimitExceeded",
    "decode",
    "encode",
]
