"""Who a connection is, and what a restricted one may do (beyond Disque, Redis 6+'s ACL).

Users as the pipeline sees them (:func:`lookup`, with ``requirepass`` standing for
``default``'s password), authentication (:func:`authenticate`, for AUTH, HELLO and
the HTTP port), and the check every request of a restricted connection goes through
(:func:`denied`, called by :meth:`~disquette.state.server.ServerState.execute`).
Users, rules and how they spread over the cluster: :mod:`disquette.core.acl`; the ACL
command: :mod:`disquette.commands.acl`.

**The check.** A connection whose user may run everything on every queue has
``client.acl`` None and is never checked. Otherwise: the command (and its
subcommand) must be allowed (``-NOPERM User u has no permissions to run the
'cmd' command``), then the queues it names: ADDJOB's queue must be writable,
GETJOB's FROM queues, QLEN's, QSTAT's, QPEEK's and OBSERVE JOBS's readable,
PAUSE's and CRON SET's writable (``-NOPERM No permissions to access a queue``);
then the jobs it names by ID, by their queue (``-NOPERM No permissions to
access a job``). A job this node does not hold has no queue known here: it is
refused unless the user has the permission on every queue (``*``), because
ACKJOB of an unknown ID makes a dummy ack that would delete the job
cluster-wide, whatever its queue. SHOW, JSCAN, QSCAN and OBSERVE QUEUES filter
instead of refusing. Every refusal, and every failed AUTH, goes to ACL LOG.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from disquette.config.cstring import to_bytes
from disquette.core import acl
from disquette.core.acl import DEFAULT, READ, WRITE, User
from disquette.core.ids import is_valid
from disquette.protocol import reply
from disquette.state.clients import client_info_line

if TYPE_CHECKING:
    from disquette.core.client import Client
    from disquette.state.command import Command
    from disquette.state.server import ServerState

QUEUE_DENIED: Final = reply.error("NOPERM No permissions to access a queue")
JOB_DENIED: Final = reply.error("NOPERM No permissions to access a job")
WRONGPASS: Final = reply.error("WRONGPASS invalid username-password pair or user is disabled.")

#: The access each command taking job IDs needs on the jobs' queues.
JOB_ACCESS: Final[dict[str, int]] = {
    "ackjob": READ, "fastack": READ, "nack": READ, "working": READ, "joblog": READ,
    "enqueue": WRITE, "dequeue": WRITE, "deljob": WRITE, "cancel": WRITE,
    "waitjob": 0,  # either (a producer waits for its job, a consumer may too)
}  # fmt: skip


# ---------------------------------------------------------------------------
# Users as the shell sees them.


def requirepass(state: ServerState) -> bytes | None:
    password = state.config.requirepass
    return to_bytes(password) if password else None


def lookup(state: ServerState, name: bytes) -> User | None:
    return state.node.acl.user(name, requirepass(state))


def restriction(user: User | None) -> User | None:
    """What a connection of ``user`` keeps in ``client.acl``: None for a user that may
    do everything, else the user (a deleted one: nothing allowed)."""
    if user is None:
        return User(b"")
    return None if user.full else user


def auth_required(state: ServerState) -> bool:
    """Whether a new connection must authenticate: ``default`` is off or has a password."""
    default = lookup(state, DEFAULT)
    return default is None or not (default.enabled and default.nopass)


#: Compared against when the user does not exist, so that an unknown name takes as long.
_NOBODY: Final = User(b"", passwords=(acl.password_hash(b""),))


def authenticate(state: ServerState, client: Client | None, name: bytes, password: bytes) -> bool:
    """Check ``name``'s password (constant time); on success ``client`` (None: a
    request of the HTTP port) now acts as that user; a failure goes to ACL LOG."""
    user = lookup(state, name)
    matches = (user or _NOBODY).check_password(password)
    if user is None or not matches:
        log(state, client, b"auth", b"AUTH", name)
        return False
    if client is not None:
        client.authenticated = True
        client.username = name
        client.acl = restriction(user)
    return True


def refresh_clients(state: ServerState) -> None:
    """The user table changed: every connection follows its user's new rules; those of
    a deleted user are closed (as ACL DELUSER does in Redis)."""
    state.acl_default = state.node.acl.get(DEFAULT) is not None
    for client in list(state.clients.values()):
        user = lookup(state, client.username)
        client.acl = restriction(user)
        if user is None and state.shell is not None:
            state.shell.close_client(client)


def log(state: ServerState, client: Client | None, reason: bytes, obj: bytes,
        username: bytes | None = None) -> None:  # fmt: skip
    """An ACL LOG entry for a refusal (or a failed authentication)."""
    now_ms = int(time.time() * 1000)
    if client is None:
        info = b"http"
        name = username or b""
    else:
        info = client_info_line(client, now_ms) + b" user=" + client.username
        name = username if username is not None else client.username
    state.acl_log.add(reason, obj, name, info, now_ms, state.config.acllog_max_len)


# ---------------------------------------------------------------------------
# The check of a restricted connection's requests.


def denied(state: ServerState, client: Client, cmd: Command, argv: list[bytes]) -> bytes | None:
    """Why ``client.acl`` may not run ``argv`` (an error reply), or None."""
    user = client.acl
    assert user is not None
    name = cmd.name
    sub = None
    if name in acl.SUBCOMMANDS and len(argv) > 1:
        sub = argv[1].lower().decode("utf-8", "replace")
    if not user.may_run(name, sub):
        shown = name if sub is None or user.may_run(name, None) else f"{name}|{sub}"
        log(state, client, b"command", shown.encode())
        text = client.username.decode("utf-8", "replace")
        return reply.error(f"NOPERM User {text} has no permissions to run the '{shown}' command")
    tag = _tag_of(name, argv)
    if tag is not None:  # a tag's jobs (core/tags.py) need the access their IDs would
        jobs = state.node.jobs
        for job_id in state.node.tags.ids(tag):
            job = jobs.get(job_id)  # (one no longer held is never delivered again)
            if job is not None and job.queue is not None and not user.may(job.queue, READ):
                log(state, client, b"job", job_id)
                return JOB_DENIED
    access = JOB_ACCESS.get(name)
    if access is not None:
        return _jobs_denied(state, client, user, argv[1:], access)
    check = QUEUE_CHECKS.get(name)
    if check is None:
        return None
    for queue, perm in check(argv):
        if not user.may(queue, perm):
            log(state, client, b"queue", queue)
            return QUEUE_DENIED
    return None


def _tag_of(name: str, argv: list[bytes]) -> bytes | None:
    """The delivery tag ``GETJOB ... TAG name``, ``ACKJOB TAG name`` or ``WORKING TAG
    name`` acts on (None: no tag). A tag is a name anyone may say: the jobs it holds
    must be readable by whoever uses it."""
    if name in ("ackjob", "working"):
        return argv[2] if len(argv) == 3 and argv[1].lower() == b"tag" else None
    if name == "getjob":
        for i in range(1, len(argv) - 1):
            option = argv[i].lower()
            if option == b"from":
                return None
            if option == b"tag":
                return argv[i + 1]
    return None


def _jobs_denied(
    state: ServerState, client: Client, user: User, args: list[bytes], access: int
) -> bytes | None:
    jobs = state.node.jobs
    for arg in args:
        if not is_valid(arg):
            continue  # an option, or a bad ID the command itself refuses
        job = jobs.get(arg)
        queue = None if job is None else job.queue
        if queue is None:
            allowed = user.everywhere(access or READ) or (not access and user.everywhere(WRITE))
        elif access:
            allowed = user.may(queue, access)
        else:
            allowed = user.access(queue) != 0
        if not allowed:
            log(state, client, b"job", arg)
            return JOB_DENIED
    return None


def _getjob_queues(argv: list[bytes]) -> list[tuple[bytes, int]]:
    """GETJOB's FROM queues (none when the syntax is wrong: the command says so)."""
    i = 1
    while i < len(argv):
        option = argv[i].lower()
        if option == b"from":
            return [(q, READ) for q in argv[i + 1 :]]
        i += 2 if option in (b"timeout", b"count", b"tag") else 1
    return []


def _first(perm: int) -> Callable[[list[bytes]], list[tuple[bytes, int]]]:
    return lambda argv: [(argv[1], perm)]


def _observe_queues(argv: list[bytes]) -> list[tuple[bytes, int]]:
    return [(argv[2], READ)] if len(argv) > 2 and argv[1].lower() == b"jobs" else []


def _cron_queues(argv: list[bytes]) -> list[tuple[bytes, int]]:
    return [(argv[3], WRITE)] if len(argv) > 3 and argv[1].lower() == b"set" else []


#: The queues a command names, and the access it needs on each.
QUEUE_CHECKS: Final[dict[str, Callable[[list[bytes]], list[tuple[bytes, int]]]]] = {
    "addjob": _first(WRITE),
    "getjob": _getjob_queues,
    "qlen": _first(READ),
    "qstat": _first(READ),
    "qpeek": _first(READ),
    "pause": _first(WRITE),
    "observe": _observe_queues,
    "cron": _cron_queues,
}


def job_visible(client: Client, job_id: bytes, state: ServerState) -> bool:
    """OBSERVE JOB's rule: the job's queue is readable."""
    job = state.node.jobs.get(job_id)
    return acl.visible(client.acl, None if job is None else job.queue)
