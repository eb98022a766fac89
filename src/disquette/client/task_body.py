"""The body of a task job: which task to run, with which arguments, version 1.

A task job's body is one map, written as JSON (the default: any language can
produce it) or as msgpack (smaller, and carries bytes)::

    {"v": 1, "task": "billing.charge", "args": [42, "EUR"], "kwargs": {"retry": true}}

* ``v`` -- the format version, 1. A worker refuses (dead-letters) a body of a
  version it does not know rather than guess.
* ``task`` -- the task's name (``@app.task(name=...)``, by default
  ``module.function``).
* ``args`` -- the positional arguments, a list (may be absent: none).
* ``kwargs`` -- the keyword arguments, a map with string keys (may be absent).
* ``meta`` -- optional, a map of strings: context carried from the producer to
  the worker (the W3C ``traceparent``/``tracestate`` of OpenTelemetry).

The two encodings are told apart by the first byte: ``{`` (after optional
whitespace) is JSON, anything else is tried as msgpack (a map starts with
0x80-0x8f, 0xde or 0xdf). Nothing else is in the body, so a producer in another
language writes the map above and nothing more.

:func:`decode` raises :class:`BodyError` for anything else (not JSON nor
msgpack, not a map, a wrong type, an unknown version): the worker dead-letters
such a job with a log line instead of failing it forever.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

VERSION = 1
ENCODINGS = ("json", "msgpack")

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_loads = json.loads


def _json_chunks() -> Callable[[Any, int], Sequence[str]]:
    """The C encoder behind ``_dumps`` (same output), without ``JSONEncoder.encode``'s
    per-call set-up: it costs a sixth of it. No circular-reference markers (shared
    by threads they could see one call's objects in another's): a cycle raises
    RecursionError instead, which :class:`Encoder` reports as the others."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython builds have the C accelerator
        return lambda value, _: (_dumps(value),)
    default = json.JSONEncoder().default  # TypeError for what JSON cannot carry
    return make(None, default, json.encoder.encode_basestring, None, ":", ",", False, False, True)  # type: ignore[no-any-return]


_chunks = _json_chunks()


class BodyError(ValueError):
    """A job body that is not a task message of a known version."""


@dataclass(slots=True)
class Message:
    """One task call: the task's name, its arguments and the producer's context."""

    task: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, str] = field(default_factory=dict)


class Encoder:
    """Writes the bodies of one task's calls: ``Encoder(task, encoding)(args, kwargs,
    meta)``. The JSON head (version and name) is written once; the arguments go
    straight to the C encoder, so a call costs about a microsecond (bulk sends
    are bound by it). ``TypeError`` for arguments the encoding cannot carry."""

    __slots__ = ("_head", "encoding", "task")

    def __init__(self, task: str, encoding: str = "json") -> None:
        if encoding not in ENCODINGS:
            raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}, not {encoding!r}")
        self.task = task
        self.encoding = encoding
        self._head = f'{{"v":{VERSION},"task":{_dumps(task)},"args":'

    def __call__(
        self,
        args: Sequence[Any],
        kwargs: Mapping[str, Any] | None = None,
        meta: Mapping[str, str] | None = None,
    ) -> bytes:
        if self.encoding == "msgpack":
            return self._msgpack(args, kwargs, meta)
        try:
            text = self._head + "".join(_chunks(args, 0))
            if kwargs:
                text += ',"kwargs":' + "".join(_chunks(kwargs, 0))
            if meta:
                text += ',"meta":' + "".join(_chunks(meta, 0))
        except (TypeError, ValueError, RecursionError) as exc:
            raise TypeError(f"task {self.task}: arguments not JSON-serializable: {exc}") from None
        return (text + "}").encode()

    def _msgpack(
        self, args: Sequence[Any], kwargs: Mapping[str, Any] | None, meta: Mapping[str, str] | None
    ) -> bytes:
        body: dict[str, Any] = {"v": VERSION, "task": self.task, "args": args}
        if kwargs:
            body["kwargs"] = kwargs
        if meta:
            body["meta"] = meta
        try:
            return msgpack.packb(body, use_bin_type=True)  # type: ignore[no-any-return]
        except (TypeError, ValueError, OverflowError) as exc:
            raise TypeError(
                f"task {self.task}: arguments not msgpack-serializable: {exc}"
            ) from None


def encode(message: Message, encoding: str = "json") -> bytes:
    """The body of ``message`` (``TypeError`` for arguments the encoding cannot carry)."""
    return Encoder(message.task, encoding)(message.args, message.kwargs, message.meta)


def decode(body: bytes) -> Message:
    """The message in a job body; :class:`BodyError` if it is not one."""
    raw: Any
    if body.lstrip()[:1] == b"{":
        try:
            raw = _loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise BodyError(f"not valid JSON: {exc}") from None
    else:
        try:
            raw = msgpack.unpackb(body, raw=False, strict_map_key=False)
        except Exception as exc:  # msgpack raises several unrelated types for bad input
            raise BodyError(f"neither JSON nor msgpack ({type(exc).__name__})") from None
    if type(raw) is not dict:
        raise BodyError(f"a task body is a map, not {type(raw).__name__}")
    version = raw.get("v")
    if version != VERSION:
        raise BodyError(f"unknown body version {version!r} (this worker reads {VERSION})")
    task, args, kwargs = raw.get("task"), raw.get("args", ()), raw.get("kwargs", {})
    meta = raw.get("meta", {})
    if type(task) is not str or not task:
        raise BodyError("the body names no task")
    if not isinstance(args, list | tuple):
        raise BodyError(f"args must be a list, not {type(args).__name__}")
    if type(kwargs) is not dict or not all(type(k) is str for k in kwargs):
        raise BodyError("kwargs must be a map with string keys")
    if type(meta) is not dict or not all(type(k) is type(v) is str for k, v in meta.items()):
        raise BodyError("meta must be a map of strings")
    return Message(task, tuple(args), kwargs, meta)
