"""Users and their permissions, cluster-wide (beyond Disque: Redis 6's ACL, for queues).

A user has a name, an on/off switch, passwords (kept as SHA-256 hex digests, as
Redis keeps them, never in clear), the commands it may run and the queues it may
read or write. Rules are Redis's words, applied left to right by
:func:`apply_rule`: ``on``/``off``, ``>pass``/``<pass``, ``#hash``/``!hash``,
``nopass``, ``resetpass``, ``+cmd``/``-cmd`` (and ``+cmd|sub``), ``+@cat``/``-@cat``,
``allcommands``/``nocommands``, queue patterns ``~pat`` (read and write),
``%R~pat``, ``%W~pat``, ``%RW~pat``, ``allqueues``/``resetqueues`` (``allkeys`` and
``resetkeys`` too, for operators' habits), and ``reset``. Patterns are Redis globs
(:func:`disquette.config.glob.stringmatch`).

**Reading and writing a queue.** ADDJOB writes; GETJOB and the commands on the
jobs a consumer was given (ACKJOB, FASTACK, NACK, WORKING, JOBLOG, SHOW) read;
ENQUEUE, DEQUEUE, DELJOB and CANCEL write the job's queue; WAITJOB needs either.
:data:`CATEGORIES` says which command is in which category; docs/security.md
has the same table for operators.

**What is stored.** A user is one record of a
:class:`~disquette.core.replicated.ReplicatedTable`: every node holds every user,
the greater version (Lamport counter, then node ID) wins, deletions are
tombstones, a digest exchange once a second heals partitions, and the table is
saved in nodes.conf (``vars acl <hex>`` lines). A record is its rules in a
normal form (the command rules after the last ``+@all``/``-@all``, each target
once, the queue patterns each once), so :func:`describe` prints what ACL LIST
shows and applying that text to a fresh user gives the same record.

**The default user.** Until someone writes a ``default`` record, ``default`` is
built from the node's ``requirepass``: ``on``, that password (or ``nopass``
without one), every queue, every command; the shell passes requirepass to
:meth:`AclTable.user`. A written ``default`` record then wins on every node.

A user that may run every command on every queue is *unrestricted*
(:attr:`User.full`): the shell skips every check for its connections.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import msgpack

from disquette.config.glob import stringmatch
from disquette.core import messages as msg
from disquette.core.replicated import ReplicatedTable, unpack, valid_version

if TYPE_CHECKING:
    from disquette.core.node import Node

READ: Final = 1
WRITE: Final = 2
RW: Final = 3
PERM_NAMES: Final = {READ: b"%R~", WRITE: b"%W~", RW: b"~"}
PERM_BY_TEXT: Final = {b"r": READ, b"w": WRITE, b"rw": RW, b"wr": RW}
ACL_VAR: Final = b"acl"  # nodes.conf: ``vars acl <hex>``
DEFAULT: Final = b"default"
MAX_NAME: Final = 256  # bytes of a user name
MAX_PATTERN: Final = 1024  # bytes of a queue pattern
MAX_PASSWORDS: Final = 64  # passwords (hashes) of one user
MAX_RULES: Final = 256  # command rules and queue patterns of one user, each
MAX_CACHED: Final = 4096  # queue names whose permissions a user remembers
HASH_LEN: Final = 64

#: The categories and their commands (``cmd|sub`` for one subcommand). Every
#: command is in ``@all`` and in at least one other (a unit test checks it).
CATEGORIES: Final[dict[str, tuple[str, ...]]] = {
    "produce": ("addjob", "waitjob", "cancel"),
    "consume": ("getjob", "ackjob", "fastack", "nack", "working"),
    "read": ("show", "jscan", "joblog", "qlen", "qstat", "qpeek", "qscan", "observe"),
    "write": ("addjob", "getjob", "ackjob", "fastack", "nack", "working", "cancel", "enqueue",
              "dequeue", "deljob", "pause"),
    "admin": ("acl", "bgrewriteaof", "client", "cluster", "config", "cron", "debug", "info",
              "latency", "loadjob", "monitor", "qpolicy", "shutdown", "slowlog"),
    "dangerous": ("acl", "bgrewriteaof", "client", "cluster", "config", "debug", "deljob",
                  "dequeue", "info", "latency", "loadjob", "monitor", "qpolicy", "shutdown",
                  "slowlog"),
    "connection": ("auth", "hello", "ping", "time", "command", "acl|whoami",
                   "client|setname", "client|getname"),
}  # fmt: skip
#: Commands whose first argument is a subcommand (``+cmd|sub`` rules name one).
SUBCOMMANDS: Final = frozenset(
    ("acl", "client", "cluster", "command", "config", "cron", "debug", "latency", "observe",
     "qpolicy", "slowlog")
)  # fmt: skip
ALL_COMMANDS: Final = frozenset(c for cs in CATEGORIES.values() for c in cs if "|" not in c)
_BAD_BYTES: Final = frozenset(range(0x21)) | {0x7F}


def password_hash(password: bytes) -> bytes:
    """The stored form of a password: its SHA-256 as lower-case hex (Redis's)."""
    return hashlib.sha256(password).hexdigest().encode()


def _printable(text: bytes) -> bool:
    return bool(text) and not _BAD_BYTES.intersection(text)


def valid_name(name: bytes) -> bool:
    """A user name: 1 to 256 bytes, no spaces or control characters."""
    return len(name) <= MAX_NAME and _printable(name)


class AclError(ValueError):
    """A rule ACL SETUSER cannot apply (its text is the reason Redis gives)."""


@dataclass(slots=True, eq=False, repr=False)
class User:
    """One version of a user (``deleted``: the version that removed it)."""

    name: bytes
    enabled: bool = False
    nopass: bool = False
    passwords: tuple[bytes, ...] = ()
    commands: tuple[str, ...] = ("-@all",)
    queues: tuple[tuple[int, bytes], ...] = ()
    counter: int = 0
    origin: bytes = b""
    deleted: bool = False
    # What the rules come to, worked out once per version:
    allowed: frozenset[str] = field(init=False)
    _denied: frozenset[str] = field(init=False)
    full: bool = field(init=False)
    _cache: dict[bytes, int] = field(init=False)

    def __post_init__(self) -> None:
        self.allowed, self._denied = _fold(self.commands)
        self.full = self.commands == ("+@all",) and (RW, b"*") in self.queues
        self._cache = {}

    def copy(self, counter: int = 0, origin: bytes = b"") -> User:
        return User(self.name, self.enabled, self.nopass, self.passwords, self.commands,
                    self.queues, counter, origin)  # fmt: skip

    # Checks ------------------------------------------------------------------

    def may_run(self, command: str, sub: str | None) -> bool:
        """Whether the user may run ``command`` (``sub``: its subcommand, lower case)."""
        if command in self.allowed:
            return sub is None or not self._denied or f"{command}|{sub}" not in self._denied
        return sub is not None and f"{command}|{sub}" in self.allowed

    def access(self, queue: bytes) -> int:
        """What the user may do with ``queue``: READ and WRITE bits."""
        cache = self._cache
        bits = cache.get(queue)
        if bits is None:
            bits = 0
            for perm, pattern in self.queues:
                if perm & ~bits and stringmatch(pattern, queue):
                    bits |= perm
            if len(cache) >= MAX_CACHED:
                cache.clear()
            cache[queue] = bits
        return bits

    def may(self, queue: bytes, perm: int) -> bool:
        """Whether the user has every bit of ``perm`` on ``queue``."""
        return self.access(queue) & perm == perm

    def everywhere(self, perm: int) -> bool:
        """Whether a pattern gives ``perm`` on every queue (``*``): what a job this node
        does not hold needs, its queue unknown here."""
        return any(p & perm == perm and pattern == b"*" for p, pattern in self.queues)

    def check_password(self, password: bytes) -> bool:
        """Whether ``password`` opens this user (off: never); the hashes are compared in
        constant time, every one of them."""
        given = password_hash(password)
        found = False
        for stored in self.passwords:
            found |= hmac.compare_digest(given, stored)
        return self.enabled and (self.nopass or found)

    # Text --------------------------------------------------------------------

    def rules(self) -> list[bytes]:
        """The user's rules, in the order ACL LIST prints them."""
        words = [b"on" if self.enabled else b"off"]
        if self.nopass:
            words.append(b"nopass")
        words += [b"#" + h for h in self.passwords]
        words += [PERM_NAMES[perm] + pattern for perm, pattern in self.queues]
        words += [rule.encode() for rule in self.commands]
        return words

    def encode(self) -> bytes:
        """The record as the bus and nodes.conf carry it."""
        flat: list[object] = []
        for perm, pattern in self.queues:
            flat += [perm, pattern]
        return msgpack.packb(
            (self.name, self.enabled, self.nopass, self.passwords, self.commands, flat,
             self.counter, self.origin, self.deleted),
            use_bin_type=True,
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"User({describe(self)!r}, v{self.counter})"


def describe(user: User) -> bytes:
    """ACL LIST's line for ``user``."""
    return b" ".join([b"user", user.name, *user.rules()])


def _fold(rules: Iterable[str]) -> tuple[frozenset[str], frozenset[str]]:
    """The commands (and ``cmd|sub``) a list of command rules allows, and the
    subcommands it takes back from commands it allows whole."""
    allowed: set[str] = set()
    denied: set[str] = set()
    for rule in rules:
        target = rule[1:]
        names: Iterable[str] = (target,)
        if target == "@all":
            names = ALL_COMMANDS
        elif target[0] == "@":
            names = CATEGORIES[target[1:]]
        for name in names:
            parent, bar, _sub = name.partition("|")
            if rule[0] == "+":
                allowed.add(name)
                denied.discard(name)
                if not bar:
                    allowed.difference_update([a for a in allowed if a.startswith(name + "|")])
                    denied.difference_update([d for d in denied if d.startswith(name + "|")])
            elif bar:
                allowed.discard(name)
                if parent in allowed:
                    denied.add(name)
            else:
                allowed.discard(name)
                allowed.difference_update([a for a in allowed if a.startswith(name + "|")])
                denied.difference_update([d for d in denied if d.startswith(name + "|")])
    return frozenset(allowed), frozenset(denied)


def _command_target(rule: bytes) -> str:
    """The lower-case target of ``+x``/``-x`` (a command, ``cmd|sub`` or ``@cat``)."""
    try:
        target = rule[1:].decode("ascii").lower()
    except UnicodeDecodeError:
        raise AclError("Unknown command or category name in ACL") from None
    if target.startswith("@"):
        if target != "@all" and target[1:] not in CATEGORIES:
            raise AclError("Unknown command or category name in ACL")
        return target
    command, bar, sub = target.partition("|")
    if command not in ALL_COMMANDS:
        raise AclError("Unknown command or category name in ACL")
    if bar and (command not in SUBCOMMANDS or not sub or "|" in sub or not _printable(rule)):
        raise AclError("Unknown command or category name in ACL")
    return target


def _hash_arg(rule: bytes) -> bytes:
    value = rule[1:]
    if len(value) != HASH_LEN or not all(c in b"0123456789abcdef" for c in value):
        raise AclError(
            "The password hash must be exactly 64 characters and contain only lowercase "
            "hexadecimal characters"
        )
    return value


def apply_rule(user: User, rule: bytes) -> User:
    """``user`` with ``rule`` applied (a new, unversioned record); raise AclError."""
    enabled, nopass, passwords = user.enabled, user.nopass, list(user.passwords)
    commands, queues = list(user.commands), list(user.queues)
    word = rule.lower()
    first = rule[:1]
    if word == b"on" or word == b"off":
        enabled = word == b"on"
    elif word == b"nopass":
        nopass, passwords = True, []
    elif word == b"resetpass":
        nopass, passwords = False, []
    elif word in (b"allcommands", b"+@all"):
        commands = ["+@all"]
    elif word in (b"nocommands", b"-@all"):
        commands = ["-@all"]
    elif word in (b"allqueues", b"allkeys"):
        queues = [(RW, b"*")]
    elif word in (b"resetqueues", b"resetkeys"):
        queues = []
    elif word == b"reset":
        return User(user.name)
    elif first in (b">", b"#"):
        digest = password_hash(rule[1:]) if first == b">" else _hash_arg(rule)
        if digest not in passwords:
            if len(passwords) >= MAX_PASSWORDS:
                raise AclError(f"Too many passwords (at most {MAX_PASSWORDS})")
            passwords.append(digest)
        nopass = False
    elif first in (b"<", b"!"):
        digest = password_hash(rule[1:]) if first == b"<" else _hash_arg(rule)
        if digest not in passwords:
            raise AclError("The password you are trying to remove from the user does not exist")
        passwords.remove(digest)
    elif first in (b"+", b"-"):
        target = _command_target(rule)
        commands = [c for c in commands if c[1:] != target]
        if len(commands) > MAX_RULES:
            raise AclError(f"Too many command rules (at most {MAX_RULES})")
        commands.append(first.decode() + target)
    elif first in (b"~", b"%"):
        perm, pattern = _queue_pattern(rule)
        if pattern == b"*" and perm == RW:
            queues = [(RW, b"*")]
        elif (perm, pattern) not in queues:
            if len(queues) >= MAX_RULES:
                raise AclError(f"Too many queue patterns (at most {MAX_RULES})")
            queues.append((perm, pattern))
    else:
        raise AclError("Syntax error")
    return User(user.name, enabled, nopass, tuple(passwords), tuple(commands), tuple(queues))


def _queue_pattern(rule: bytes) -> tuple[int, bytes]:
    """``~pat`` (read and write) or ``%R~pat``, ``%W~pat``, ``%RW~pat``."""
    perm = RW
    if rule[:1] == b"%":
        flags, tilde, pattern = rule[1:].partition(b"~")
        found = PERM_BY_TEXT.get(flags.lower())
        if not tilde or found is None:
            raise AclError("Syntax error")
        perm = found
    else:
        pattern = rule[1:]
    if not _printable(pattern) or len(pattern) > MAX_PATTERN:
        raise AclError(
            f"Queue patterns must be 1 to {MAX_PATTERN} bytes, without spaces or control characters"
        )
    return perm, pattern


def apply_rules(user: User, rules: Iterable[bytes]) -> User:
    """``user`` with every rule applied in order (raise AclError naming the rule)."""
    for rule in rules:
        try:
            user = apply_rule(user, rule)
        except AclError as e:
            text = rule.decode("utf-8", "backslashreplace")
            raise AclError(f"Error in ACL SETUSER modifier '{text}': {e}") from None
    return user


def visible(user: User | None, queue: bytes | None) -> bool:
    """Whether SHOW, JSCAN, QSCAN and OBSERVE show ``user`` (None: unrestricted) a job
    of, or the queue, ``queue``: it is readable (a job without a queue: when every queue
    is)."""
    if user is None:
        return True
    return user.may(queue, READ) if queue is not None else user.everywhere(READ)


def builtin_default(requirepass: bytes | None) -> User:
    """``default`` as the node's ``requirepass`` makes it (no record written)."""
    passwords = (password_hash(requirepass),) if requirepass else ()
    return User(DEFAULT, True, not requirepass, passwords, ("+@all",), ((RW, b"*"),))


def decode(data: bytes) -> User | None:
    """A record from a peer or a file, or None when it is not a valid one (its rules
    are applied again: only what ACL SETUSER could have written is accepted)."""
    record = unpack(data, 9)
    if record is None:
        return None
    name, enabled, nopass, passwords, commands, flat, counter, origin, deleted = record
    if not (
        type(name) is bytes
        and valid_name(name)
        and type(enabled) is bool
        and type(nopass) is bool
        and type(passwords) is tuple
        and type(commands) is tuple
        and type(flat) is tuple
        and not len(flat) % 2
        and valid_version(counter, origin, deleted)
        and all(type(p) is bytes for p in passwords)
        and all(type(c) is str for c in commands)
        and commands[:1] in (("+@all",), ("-@all",))
        and all(type(perm) is int and perm in PERM_NAMES for perm in flat[::2])
        and all(type(p) is bytes for p in flat[1::2])
        and len(passwords) <= MAX_PASSWORDS
        and len(commands) <= MAX_RULES + 1
        and len(flat) <= 2 * MAX_RULES
    ):
        return None
    rules = [b"#" + p for p in passwords]
    rules += [PERM_NAMES[perm] + pattern for perm, pattern in zip(flat[::2], flat[1::2],
                                                                    strict=True)]  # fmt: skip
    rules += [c.encode() for c in commands]
    try:
        user = apply_rules(User(name), rules)
    except AclError:
        return None
    if user.commands != commands or len(user.passwords) != len(passwords):
        return None  # not in the normal form a write here makes
    return User(name, enabled, nopass and not passwords, user.passwords, user.commands,
                user.queues, counter, origin, deleted)  # fmt: skip


def _tombstone(name: bytes, counter: int, origin: bytes) -> User:
    return User(name, counter=counter, origin=origin, deleted=True)


def _nothing() -> None:
    pass


class AclTable(ReplicatedTable[User]):
    """The users this node knows (tombstones included), cluster-wide."""

    def __init__(self, node: Node) -> None:
        super().__init__(node, msg.ACLDIGEST, msg.ACLUSERS, ACL_VAR, decode, _tombstone)
        #: Called after every change (the shell re-reads its connections' users).
        self.on_change: Callable[[], None] = _nothing
        self._builtin: tuple[bytes | None, User] = (None, builtin_default(None))

    def user(self, name: bytes, requirepass: bytes | None) -> User | None:
        """The live user called ``name`` (``default``: built from ``requirepass`` until a
        record is written), None when there is none."""
        found = self.get(name)
        if found is not None or name != DEFAULT:
            return found
        if self._builtin[0] != requirepass:
            self._builtin = (requirepass, builtin_default(requirepass))
        return self._builtin[1]

    def users(self) -> list[bytes]:
        """The names of the live users, ``default`` included, sorted."""
        return sorted({DEFAULT, *(u.name for u in self.records.values() if not u.deleted)})

    def set_user(self, name: bytes, rules: Iterable[bytes], requirepass: bytes | None) -> None:
        """ACL SETUSER: ``rules`` applied to the user (a new one: ``off``, nothing
        allowed), written here and sent to every linked node; raise AclError."""
        current = self.user(name, requirepass) or User(name)
        user = apply_rules(current, rules)
        self.write(user.copy(self.next_counter(), self.node.myself))

    def replace(self, users: list[User]) -> None:
        """ACL LOAD: these users, and no other (``default`` goes back to requirepass's
        when ``users`` does not name it)."""
        names = {u.name for u in users}
        for user in users:
            self.write(user.copy(self.next_counter(), self.node.myself))
        for name in [n for n, u in self.records.items() if not u.deleted and n not in names]:
            self.delete(name)

    def changed(self) -> None:
        super().changed()
        self.on_change()


def install(node: Node) -> None:
    node.acl.install()
