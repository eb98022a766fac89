"""The ACL command: users and their permissions, as Redis 6+ spells them (beyond Disque).

``SETUSER``, ``GETUSER``, ``DELUSER``, ``LIST``, ``USERS``, ``WHOAMI``, ``CAT``,
``LOG``, ``SAVE``, ``LOAD`` and ``HELP``, and the aclfile they save to and load from.
Users, rules and how they spread over the cluster: :mod:`disquette.core.acl`; who a
connection is and the check of a restricted one's requests:
:mod:`disquette.state.access`.
"""

from __future__ import annotations

import os
import re
import time
from typing import TYPE_CHECKING, Final

from disquette import __version__
from disquette.commands.args import parse_int
from disquette.commands.policies import save
from disquette.commands.table import command
from disquette.core import acl
from disquette.core.acl import DEFAULT, AclError, User
from disquette.core.errors import DisqueError
from disquette.protocol import reply
from disquette.state.access import lookup, requirepass

if TYPE_CHECKING:
    from disquette.core.client import Client
    from disquette.state.server import ServerState

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
