"""The ACL log: commands refused for want of a permission, and failed authentications.

Redis's ACL LOG, entry for entry: ``count``, ``reason`` (``command``, ``queue``,
``job`` or ``auth``), ``context`` (always ``toplevel`` here: there is no MULTI
or script), ``object`` (the command, the queue, the job ID, or ``AUTH``),
``username``, ``age-seconds``, ``client-info`` (the CLIENT LIST line),
``entry-id``, ``timestamp-created`` and ``timestamp-last-updated`` (ms). An
attempt like a recent one (same reason, context, object and user, within 60
seconds) counts on that entry, which moves to the head, so a client retrying in
a loop does not push everything else out. The log is per node, as Redis's, and
keeps ``acllog-max-len`` entries.
"""

from __future__ import annotations

from collections import deque
from typing import Final

from disquette.protocol import reply

GROUPING_MS: Final = 60_000  # Redis's ACL_LOG_GROUPING_MAX_TIME_DELTA


class AclLogEntry:
    __slots__ = ("client_info", "context", "count", "created", "entry_id", "object", "reason",
                 "updated", "username")  # fmt: skip

    def __init__(self, entry_id: int, reason: bytes, obj: bytes, username: bytes,
                 client_info: bytes, now_ms: int) -> None:  # fmt: skip
        self.entry_id = entry_id
        self.count = 1
        self.reason = reason
        self.context = b"toplevel"
        self.object = obj
        self.username = username
        self.client_info = client_info
        self.created = self.updated = now_ms

    def encode(self, now_ms: int) -> bytes:
        age = b"%.3f" % ((now_ms - self.created) / 1000)
        return b"*20\r\n" + b"".join(
            [
                reply.bulk(b"count"), reply.integer(self.count),
                reply.bulk(b"reason"), reply.bulk(self.reason),
                reply.bulk(b"context"), reply.bulk(self.context),
                reply.bulk(b"object"), reply.bulk(self.object),
                reply.bulk(b"username"), reply.bulk(self.username),
                reply.bulk(b"age-seconds"), reply.bulk(age),
                reply.bulk(b"client-info"), reply.bulk(self.client_info),
                reply.bulk(b"entry-id"), reply.integer(self.entry_id),
                reply.bulk(b"timestamp-created"), reply.integer(self.created),
                reply.bulk(b"timestamp-last-updated"), reply.integer(self.updated),
            ]
        )  # fmt: skip


class AclLog:
    def __init__(self) -> None:
        self.entries: deque[AclLogEntry] = deque()
        self.next_id = 0

    def add(self, reason: bytes, obj: bytes, username: bytes, client_info: bytes,
            now_ms: int, max_len: int) -> None:  # fmt: skip
        for entry in self.entries:
            if (
                entry.reason == reason
                and entry.object == obj
                and entry.username == username
                and now_ms - entry.updated < GROUPING_MS
            ):
                entry.count += 1
                entry.updated = now_ms
                entry.client_info = client_info
                self.entries.remove(entry)
                self.entries.appendleft(entry)
                return
        entry = AclLogEntry(self.next_id, reason, obj, username, client_info, now_ms)
        self.next_id += 1
        self.entries.appendleft(entry)
        while len(self.entries) > max(max_len, 0):
            self.entries.pop()

    def reply(self, count: int, now_ms: int) -> bytes:
        shown = list(self.entries)[:count]
        return b"*%d\r\n%s" % (len(shown), b"".join(e.encode(now_ms) for e in shown))

    def reset(self) -> None:
        self.entries.clear()
