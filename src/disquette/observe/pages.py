"""Pages of the cluster-wide listings the HTTP port and the CLI read (failed jobs,
workflows): newest first, each page resumed after a cursor ``time:id`` (the last item
shown), and the wall clock their ages are counted with.

One definition for both listings, so that a cursor reads the same everywhere.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    return int(time.time() * 1000)


def parse_cursor(text: str | None) -> tuple[int, str] | None:
    """A page's cursor (``time:id`` of the last item shown) as its sort key, newest
    first; ``ValueError`` when it is not one."""
    if not text:
        return None
    when, sep, item_id = text.partition(":")
    if not sep or not when.isdigit() or not item_id:
        raise ValueError("malformed cursor (give the next of the previous page)")
    return (-int(when), item_id)
