"""The cluster-wide view's merge: several nodes' OBSERVE answers made one, and the
text form of queue names they travel in.

Both readers of the cluster-wide view use it: the HTTP API of any node
(observe/gather.py asks the nodes) and ``disquette top`` (cli/top.py asks them as a
client). It imports nothing of the server or the core, so a client tool loads none.

A queue name may hold any bytes; in JSON, URLs and Prometheus labels it is UTF-8 text
when it decodes, else ``~b64~`` and its URL-safe base64 (:func:`name_text`, reversed
by :func:`name_bytes`), so that every name round-trips.

Merging rules (what /api/queues and friends promise):

* a queue's ``len``, ``jobs_in``, ``jobs_out``, ``nacks``, ``additional_deliveries``
  and ``blocked`` are sums over the nodes that have it; ``nodes`` maps each to its
  length; ``age`` is the oldest; ``paused`` is the union of the nodes' pause flags;
* ``sort=name`` pages are exact: each node gives its first ``limit`` names after the
  cursor, and the first ``limit`` names of their union are the cluster's;
* ``sort=len|activity`` ranks the sums of each node's top ``offset + limit`` (exact
  when a queue lives on one node, a close ranking otherwise); the cursor is an offset
  and a ranking goes at most 1000 deep.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Final

#: Seconds a node has to answer.
TIMEOUT: Final = 1.0
#: A queue name that is not UTF-8 is written with this prefix and URL-safe base64.
B64_PREFIX: Final = "~b64~"
PAUSE_BITS: Final = {"none": 0, "in": 1, "out": 2, "all": 3}
PAUSE_NAMES: Final = ("none", "in", "out", "all")
SUMMED: Final = ("len", "jobs_in", "jobs_out", "nacks", "additional_deliveries", "blocked")

Answers = dict[str, Any]  # node id -> its decoded answer (None: a null reply)


def name_text(name: bytes) -> str:
    """A queue name as text: itself when UTF-8 (and not mistakable for the escape)."""
    try:
        text = name.decode()
    except UnicodeDecodeError:
        text = None
    if text is not None and not text.startswith(B64_PREFIX):
        return text
    return B64_PREFIX + base64.urlsafe_b64encode(name).decode()


def name_bytes(text: str) -> bytes | None:
    """The name :func:`name_text` wrote (None: a malformed ``~b64~`` escape)."""
    if not text.startswith(B64_PREFIX):
        return text.encode(errors="surrogateescape")
    try:
        return base64.urlsafe_b64decode(text[len(B64_PREFIX) :].encode())
    except (binascii.Error, ValueError):
        return None


def merge_queues(answers: Answers) -> dict[bytes, dict[str, Any]]:
    """Queue summaries of several nodes merged by name (module docstring's rules)."""
    merged: dict[bytes, dict[str, Any]] = {}
    for node_id, page in answers.items():
        for summary in page["queues"]:
            key = name_bytes(summary["name"]) or b""
            into = merged.get(key)
            if into is None:
                into = merged[key] = {
                    "name": summary["name"],
                    **dict.fromkeys(SUMMED, 0),
                    "nodes": {},
                    "paused": 0,
                    "age": None,
                }
            for field in SUMMED:
                into[field] += summary[field]
            into["nodes"][node_id] = summary["len"]
            into["paused"] |= PAUSE_BITS.get(summary["paused"], 0)
            age = summary["age"]
            if age is not None and (into["age"] is None or age > into["age"]):
                into["age"] = age
    for into in merged.values():
        into["paused"] = PAUSE_NAMES[into["paused"]]
    return merged


def rank_key(sort: str) -> Any:
    if sort == "len":
        return lambda q: (-q["len"], name_bytes(q["name"]) or b"")
    return lambda q: (-(q["jobs_in"] + q["jobs_out"]), name_bytes(q["name"]) or b"")
