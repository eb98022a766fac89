"""ACL: users and their permissions, as Redis 6+ spells them (beyond Disque).

The ACL command (``SETUSER``, ``GETUSER``, ``DELUSER``, ``LIST``, ``USERS``,
``WHOAMI``, ``CAT``, ``LOG``, ``SAVE``, ``LOAD``, ``HELP``), the check every
request of a restricted connection goes through (:func:`denied`, called by
:meth:`~disquette.commands.state.ServerState.execute`), and authentication
(:func:`authenticate`, for AUTH, HELLO and the HTTP port). Users, rules and how
they spread over the cluster: :mod:`disquette.core.acl`.

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

import os
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from disquette import __version__
from disquette.commands.args import parse_int
from disquette.commands.policies import save
from disquette.commands.table import Command, command
from disquette.config.cstring import to_bytes
from disquette.core import acl
from disquette.core.acl import DEFAULT, READ, WRITE, AclError, User
from disquette.core.errors import DisqueError
from disquette.core.ids import is_valid
from disquette.protocol import reply

if TYPE_CHECKING:
    from disquette.commands.state import ServerState
    from disquette.core.client import Client

QUEUE_DENIED: Final = reply.error("NOPERM No permissions to access a queue")
JOB_DENIED: Final = reply.error("NOPERM No permissions to access a job")
WRONGPASS: Final = reply.error("WRONGPASS invalid username-password pair or user is disabled.")
NO_ACLFILE: Final = reply.err(
    "This instance is not configured to use an ACL file. You may want to specify users via "
    "the ACL SETUSER command: they are saved in nodes.conf and spread to every node."
)
DEFAULT_UNDELETABLE: Final = reply.err("The 'default' user cannot be removed")
BAD_USERNAME: Final = reply.err(
    f"Usernames must be 1 to {acl.MAX_NAME} bytes, without spaces or control characters"
)
HELP: Final = (
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "SETUSER <username> <rule> [<rule> ...]: create or modify a user (cluster-wide).",
    "GETUSER <username>: a user's flags, passwords (hashed), commands and queue patterns.",
    "DELUSER <username> [<username> ...]: delete users (cluster-wide).",
    "LIST: every user as its rules.",
    "USERS: every user name.",
    "WHOAMI: the user of this connection.",
    "CAT [<category>]: the categories, or the commands of one.",
    "LOG [<count> | RESET]: recent refusals and failed authentications on this node.",
    "SAVE: write the users to the aclfile.",
    "LOAD: replace the users with the aclfile's (cluster-wide).",
    "HELP: this text.",
)
#: Unknown ACL subcommand (Redis's words).
_UNKNOWN: Final = "unknown subcommand or wrong number of arguments for '{}'. Try ACL HELP."

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
    # (imported here: introspection imports connection, which imports this module)
    from disquette.commands.introspection import client_info_line

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


# ---------------------------------------------------------------------------
# The ACL command.


def _getuser(user: User | None) -> bytes:
    """Redis's GETUSER map (``keys``: the queue patterns, as redis-py reads them)."""
    if user is None:
        return reply.NULL_ARRAY
    flags = [b"on" if user.enabled else b"off"] + ([b"nopass"] if user.nopass else [])
    queues = b" ".join(acl.PERM_NAMES[p] + pattern for p, pattern in user.queues)
    return b"*12\r\n" + b"".join(
        [
            reply.bulk(b"flags"), reply.bulk_array(flags),
            reply.bulk(b"passwords"), reply.bulk_array(list(user.passwords)),
            reply.bulk(b"commands"), reply.bulk(" ".join(user.commands).encode()),
            reply.bulk(b"keys"), reply.bulk(queues),
            reply.bulk(b"channels"), reply.bulk(b""),
            reply.bulk(b"selectors"), reply.EMPTY_ARRAY,
        ]
    )  # fmt: skip


def _log(state: ServerState, argv: list[bytes]) -> bytes:
    now_ms = int(time.time() * 1000)
    if len(argv) == 2:
        return state.acl_log.reply(10, now_ms)
    if argv[2].lower() == b"reset":
        state.acl_log.reset()
        return reply.OK
    count = parse_int(argv[2])
    if count is None:
        raise DisqueError(reply.err("value is not an integer or out of range"))
    if count <= 0:
        raise DisqueError(reply.err("value is out of range, must be positive"))
    return state.acl_log.reply(count, now_ms)


def _cat(argv: list[bytes]) -> bytes:
    if len(argv) == 2:
        return reply.bulk_array([c.encode() for c in ("all", *acl.CATEGORIES)])
    name = argv[2].lower().decode("utf-8", "replace").removeprefix("@")
    if name == "all":
        return reply.bulk_array([c.encode() for c in sorted(acl.ALL_COMMANDS)])
    if name not in acl.CATEGORIES:
        raise DisqueError(reply.err(f"Unknown category '{name[:128]}'"))
    return reply.bulk_array([c.encode() for c in acl.CATEGORIES[name]])


#: The aclfile format ACL SAVE writes, and the comment that opens the file and says so
#: (1: a file without it, as the releases before versions wrote, or as written by hand;
#: 0.1.0 skips the comment as any other).
ACLFILE_FORMAT: Final = 2
_FORMAT_LINE: Final = re.compile(
    rb"#\s*disquette aclfile format (\d+)(?: \(disquette ([^)\s]+)\))?"
)


def format_line() -> bytes:
    return b"# disquette aclfile format %d (disquette %s)\n" % (
        ACLFILE_FORMAT,
        __version__.encode(),
    )


def read_aclfile(path: str) -> list[User]:
    """The users an aclfile describes (``user <name> <rule> ...`` lines; blank lines and
    ``#`` comments skipped); raise AclError with the file's name and line, and for a
    file whose format comment names a format above :data:`ACLFILE_FORMAT`."""
    with open(path, "rb") as f:
        lines = f.read().splitlines()
    users: dict[bytes, User] = {}
    for number, line in enumerate(lines, 1):
        words = line.split()
        if not words or words[0].startswith(b"#"):
            found = _FORMAT_LINE.match(line.strip())
            if found is not None and int(found.group(1)) > ACLFILE_FORMAT:
                writer = (found.group(2) or b"(newer)").decode(errors="replace")
                raise AclError(
                    f"{path}:{number}: the file is in aclfile format {int(found.group(1))}, "
                    f"written by disquette {writer}; this release (disquette {__version__}) "
                    f"reads formats 1 to {ACLFILE_FORMAT}"
                )
            continue
        try:
            if words[0] != b"user" or len(words) < 2:
                raise AclError("line should start with user keyword followed by the username")
            if not acl.valid_name(words[1]):
                raise AclError("invalid user name")
            if words[1] in users:
                raise AclError(f"duplicate user '{words[1].decode(errors='replace')}'")
            users[words[1]] = acl.apply_rules(User(words[1]), words[2:])
        except AclError as e:
            raise AclError(f"{path}:{number}: {e}") from None
    return list(users.values())


def _save(state: ServerState) -> bytes:
    path = state.config.aclfile
    if not path:
        raise DisqueError(NO_ACLFILE)
    table = state.node.acl
    users = [lookup(state, name) for name in table.users()]
    text = format_line() + b"".join(acl.describe(u) + b"\n" for u in users if u is not None)
    temp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(temp, "wb") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except OSError as e:
        raise DisqueError(reply.err(f"There was an error trying to save the ACLs: {e}")) from e
    return reply.OK


def _load(state: ServerState) -> bytes:
    path = state.config.aclfile
    if not path:
        raise DisqueError(NO_ACLFILE)
    try:
        users = read_aclfile(path)
    except (OSError, AclError) as e:
        raise DisqueError(reply.err(str(e))) from e
    state.node.dialect.require(b"users", "ACL LOAD")
    state.node.acl.replace(users)
    save(state, "users")
    return reply.OK


@command("acl", -2, "a")
def acl_(state: ServerState, client: Client, argv: list[bytes]) -> bytes:
    table = state.node.acl
    sub = argv[1].lower()
    n = len(argv)
    if sub == b"setuser" and n >= 3:
        if not acl.valid_name(argv[2]):
            raise DisqueError(BAD_USERNAME)
        state.node.dialect.require(b"users", "ACL SETUSER")
        try:
            table.set_user(argv[2], argv[3:], requirepass(state))
        except AclError as e:
            raise DisqueError(reply.err(str(e))) from e
        save(state, "user")
        return reply.OK
    if sub == b"getuser" and n == 3:
        return _getuser(lookup(state, argv[2]))
    if sub == b"deluser" and n >= 3:
        if DEFAULT in argv[2:]:
            raise DisqueError(DEFAULT_UNDELETABLE)
        state.node.dialect.require(b"users", "ACL DELUSER")
        deleted = sum(table.delete(name) for name in set(argv[2:]))
        if deleted:
            save(state, "user")
        return reply.integer(deleted)
    if sub == b"list" and n == 2:
        users = [lookup(state, name) for name in table.users()]
        return reply.bulk_array([acl.describe(u) for u in users if u is not None])
    if sub == b"users" and n == 2:
        return reply.bulk_array(table.users())
    if sub == b"whoami" and n == 2:
        return reply.bulk(client.username)
    if sub == b"cat" and n <= 3:
        return _cat(argv)
    if sub == b"log" and n <= 3:
        return _log(state, argv)
    if sub == b"save" and n == 2:
        return _save(state)
    if sub == b"load" and n == 2:
        return _load(state)
    if sub == b"help" and n == 2:
        return reply.array([reply.simple(line.encode()) for line in HELP])
    raise DisqueError(reply.err(_UNKNOWN.format(argv[1].decode("utf-8", "replace"))))
