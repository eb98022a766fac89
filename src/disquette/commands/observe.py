"""OBSERVE: one node's view for operators, as JSON (beyond Disque).

The HTTP port of any node (http/api.py, through observe/gather.py) and
``disquette top`` ask every node of the cluster with this command over the client
port, so a node answers for itself and the asker merges:

* ``OBSERVE NODE``: the node's counters and its node table;
* ``OBSERVE QUEUES [SORT name|len|activity] [AFTER name] [COUNT n] [PREFIX p]``:
  a page of its queues (``AFTER`` is a name, bytes as given; ``SORT len|activity``
  ranks and ignores it);
* ``OBSERVE JOBS queue [OFFSET n] [COUNT n]``: a page of a queue's queued jobs;
* ``OBSERVE JOB id``: SHOW's fields (a null reply when the job is not here).

A restricted user (commands/acl.py) sees only the queues and jobs it may read.

The reply is one bulk string of UTF-8 JSON (observe/view.py says what is in it).
``COUNT`` goes from 0 to 1000 (default 50) and ``OFFSET`` from 0: every call costs a
bounded amount, never a scan of the jobs.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

from disquette.commands.args import int_arg
from disquette.commands.table import command
from disquette.core import acl
from disquette.core.errors import DisqueError
from disquette.core.ids import is_valid
from disquette.observe import view
from disquette.protocol import reply
from disquette.state.access import job_visible

if TYPE_CHECKING:
    from disquette.core.client import Client
    from disquette.state.server import ServerState

UNKNOWN: Final = reply.err("Unknown OBSERVE subcommand, try NODE, QUEUES, JOBS or JOB")
COUNT_RANGE: Final = reply.err(f"COUNT must be between 0 and {view.MAX_COUNT}")
OFFSET_RANGE: Final = reply.err("OFFSET can't be negative")
BAD_SORT: Final = reply.err("SORT must be name, len or activity")


def json_reply(value: Any) -> bytes:
    return reply.bulk(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _options(argv: list[bytes], start: int, names: tuple[bytes, ...]) -> dict[bytes, bytes]:
    """``NAME value`` pairs from ``argv[start:]``, each name at most once (else syntax)."""
    options: dict[bytes, bytes] = {}
    i = start
    while i < len(argv):
        name = argv[i].lower()
        if name not in names or name in options or i + 1 >= len(argv):
            raise DisqueError(reply.SYNTAX_ERROR)
        options[name] = argv[i + 1]
        i += 2
    return options


def _count(options: dict[bytes, bytes]) -> int:
    raw = options.get(b"count")
    if raw is None:
        return view.DEFAULT_COUNT
    count = int_arg(raw)
    if not 0 <= count <= view.MAX_COUNT:
        raise DisqueError(COUNT_RANGE)
    return count


@command("observe", -2, "r")
def observe(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    sub = argv[1].lower()
    if sub == b"node":
        if len(argv) != 2:
            raise DisqueError(reply.SYNTAX_ERROR)
        return json_reply(view.node_view(state))
    if sub == b"queues":
        options = _options(argv, 2, (b"sort", b"after", b"count", b"prefix"))
        sort = options.get(b"sort", b"name").lower().decode(errors="replace")
        if sort not in view.SORTS:
            raise DisqueError(BAD_SORT)
        user = client.acl
        page = view.queues_page(
            state, sort, options.get(b"after"), _count(options), options.get(b"prefix", b""),
            None if user is None else lambda name: acl.visible(user, name),
        )  # fmt: skip
        return json_reply(page)
    if sub == b"jobs":
        if len(argv) < 3:
            raise DisqueError(reply.SYNTAX_ERROR)
        options = _options(argv, 3, (b"offset", b"count"))
        offset = int_arg(options.get(b"offset", b"0"))
        if offset < 0:
            raise DisqueError(OFFSET_RANGE)
        return json_reply(view.jobs_page(state, argv[2], offset, _count(options)))
    if sub == b"job":
        if len(argv) != 3:
            raise DisqueError(reply.SYNTAX_ERROR)
        if not is_valid(argv[2]):
            raise DisqueError(reply.BADID)
        job = view.job_view(state, argv[2])
        if job is None or (client.acl is not None and not job_visible(client, argv[2], state)):
            return reply.NULL_BULK  # (a job the user may not read: as if unknown)
        return json_reply(job)
    raise DisqueError(UNKNOWN)
