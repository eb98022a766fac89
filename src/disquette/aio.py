"""The asyncio client: ``from disquette.aio import Client``.

Same constructor options and methods as :class:`disquette.Client`, as
coroutines (``await client.add_job(...)``); see :mod:`disquette.client.aio`.
"""

from disquette.client.aio import Client, Pipeline

__all__ = ["Client", "Pipeline"]
