"""The exceptions a Disque client raises, named after Disque's error codes.

A Disque error reply starts with a code (``-NOREPL Not enough reachable
nodes...``). Each code the server can send has its own class, so callers catch
what they can handle (``except PausedError``) instead of matching message
texts. Codes the client does not know become a plain :class:`ResponseError`
that still carries ``code`` and ``message``.

Failures that are not server replies have their own classes too: no node could
be reached (:class:`ConnectionFailedError`), a command was sent but its reply
was lost and the client did not send it again because that could have repeated
its effect (:class:`ReplyLostError`), or a batch ended with errors
(:class:`PipelineError`).
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Sequence
from typing import Any


class DisqueError(Exception):
    """Base class of every exception raised by the client."""


class ResponseError(DisqueError):
    """An error reply from the server: ``code`` is its first word, ``message`` the rest."""

    code = "ERR"

    def __init__(self, text: str) -> None:
        super().__init__(text)
        code, _, message = text.partition(" ")
        self.code = code
        self.message = message
        #: ``host:port`` of the node that sent the error, when the client knows it.
        self.node: str | None = None


class NoReplicationError(ResponseError):
    """``-NOREPL``: the job could not be replicated to the requested number of nodes in time.

    The node deleted its copy on a best-effort basis; replicas may survive and be
    delivered later.
    """


class LeavingError(ResponseError):
    """``-LEAVING``: the node is leaving the cluster; talk to another one.

    The client sends a refused command to another node by itself, except
    ADDJOB (see :meth:`not_resent`).
    """

    def not_resent(self, command: str) -> LeavingError:
        """This refusal, saying that ``command`` was not sent to another node and why.

        A leaving node refuses an ADDJOB that was waiting for its replicas: it
        deletes its own copy, but replicas may survive and be delivered.
        """
        effect = _uncertain_effect(command)
        error = LeavingError(
            f"{self}; {command} was not sent to another node: {effect}. "
            "Call again to retry elsewhere."
        )
        error.node = self.node
        return error


class PausedError(ResponseError):
    """``-PAUSED``: the queue is paused in input; ADDJOB is refused."""


class MaxLenError(ResponseError):
    """``-MAXLEN``: the queue already holds at least MAXLEN jobs."""


class BadIdError(ResponseError):
    """``-BADID``: a job ID is malformed (nothing was done)."""


class NoJobError(ResponseError):
    """``-NOJOB``: the node does not know the job (WORKING)."""


class TooLateError(ResponseError):
    """``-TOOLATE``: half of the job's TTL has elapsed; WORKING can no longer postpone it."""


class OutOfMemoryError(ResponseError):
    """``-OOM``: the node is over its memory limit and refuses commands that need memory."""


class TryAgainError(ResponseError):
    """``-TRYAGAIN``: nothing was done; the same command may succeed a moment later.

    disquette answers it to an ADDJOB whose DEDUP key names a job still being
    replicated for another client. The client waits and resends such an ADDJOB
    by itself for up to its timeout before raising this error.
    """


class StaleClaimError(ResponseError):
    """``-STALECLAIM``: the job was delivered again since the claim given (disquette only).

    ACKJOB, NACK or WORKING with ``CLAIM n`` where the node knows a later
    delivery of the job: nothing in the command was done. The job now belongs
    to whoever received it later; a worker holding the stale claim must not act
    on it any more (the claim is a fencing token). ``job_id``, ``claim`` and
    ``current`` (the node's latest claim) are read from the message, ``None``
    if it does not have the expected form.
    """

    _FORM = re.compile(r"Job (\S+) was delivered again since claim (\d+) \(now (\d+)\)")

    def __init__(self, text: str) -> None:
        super().__init__(text)
        match = self._FORM.search(self.message)
        self.job_id: str | None = match[1] if match else None
        self.claim: int | None = int(match[2]) if match else None
        self.current: int | None = int(match[3]) if match else None


class LogFullError(ResponseError):
    """``-LOGFULL``: the job's progress log has its 64 entries; WORKING with a text is
    refused (disquette only). WORKING without a text still postpones the requeue."""


class JobCancelledError(ResponseError):
    """``-CANCELLED``: the job was cancelled (disquette only: CANCEL); WORKING refuses it.

    A cancelled job is acknowledged cluster-wide and never delivered again: its
    worker should stop and neither ACK nor NACK it (the worker does so by itself).
    Named so as not to be mistaken for :class:`asyncio.CancelledError`.
    """


class AuthError(ResponseError):
    """``-NOAUTH``, or AUTH refused: the connection is not authenticated."""


class NoPermissionError(ResponseError):
    """``-NOPERM``: the connection's user may not run this command on this queue or job
    (disquette's ACL, Redis 6's words: docs/security.md)."""


class LoadingError(ResponseError):
    """``-LOADING``: the node is still loading its append-only file."""


class MisconfError(ResponseError):
    """``-MISCONF``: the node cannot write its append-only file and refuses writes."""


ERROR_CLASSES: dict[str, type[ResponseError]] = {
    "NOREPL": NoReplicationError,
    "LEAVING": LeavingError,
    "PAUSED": PausedError,
    "MAXLEN": MaxLenError,
    "BADID": BadIdError,
    "NOJOB": NoJobError,
    "TOOLATE": TooLateError,
    "OOM": OutOfMemoryError,
    "TRYAGAIN": TryAgainError,
    "STALECLAIM": StaleClaimError,
    "LOGFULL": LogFullError,
    "CANCELLED": JobCancelledError,
    "NOAUTH": AuthError,
    "WRONGPASS": AuthError,
    "NOPERM": NoPermissionError,
    "LOADING": LoadingError,
    "MISCONF": MisconfError,
}


def error_from_reply(text: str) -> ResponseError:
    """The exception for an error reply's text (``"PAUSED Queue paused..."``)."""
    cls = ERROR_CLASSES.get(text.partition(" ")[0], ResponseError)
    return cls(text)


class ProtocolError(DisqueError):
    """The server sent bytes that are not a valid RESP reply; the connection is dropped."""


class ConnectionFailedError(DisqueError, builtins.ConnectionError):
    """No node could be reached (every candidate refused, timed out or failed its handshake)."""


class ReplyLostError(DisqueError, builtins.ConnectionError):
    """A command was sent but the connection broke before its reply arrived.

    The command may or may not have taken effect. The client sends a command a
    second time only when repeating it cannot do anything twice (reads, ACKJOB,
    FASTACK, DELJOB, WORKING without a progress text, PAUSE, an ADDJOB with a
    DEDUP key...). For the others (ADDJOB above all, also GETJOB, NACK, ENQUEUE,
    DEQUEUE, WORKING with a text and raw commands) it raises this error and
    leaves the choice to the caller. The client has already moved to another
    node, so simply calling again retries.
    """

    def __init__(self, command: str, node: str, cause: BaseException | None = None) -> None:
        effect = _uncertain_effect(command)
        super().__init__(
            f"{command} was sent to {node} but the connection was lost before the reply "
            f"({cause or 'closed'}); {effect}. It was not sent again: call again to retry."
        )
        self.command = command
        self.node = node


_UNCERTAIN_EFFECT = {
    "ADDJOB": "the job may have been added, so retrying may create a duplicate",
    "GETJOB": "jobs it fetched, if any, are re-queued after their retry time",
    "NACK": "the jobs may already be queued again",
    "WORKING": "its progress text may have been logged, so retrying may log it twice",
}


def _uncertain_effect(command: str) -> str:
    """What ``command`` may have done when its outcome is unknown."""
    return _UNCERTAIN_EFFECT.get(command, "it may or may not have taken effect")


class PipelineError(DisqueError):
    """A batch finished with at least one failed command.

    ``results`` holds one entry per command that was sent, in order: the decoded
    reply, or the exception for that command (a :class:`ResponseError`, or a
    :class:`ReplyLostError` when the connection broke before its reply). Commands
    after the last entry were never sent.
    """

    def __init__(self, results: Sequence[Any]) -> None:
        self.results = list(results)
        errors = [r for r in self.results if isinstance(r, BaseException)]
        super().__init__(
            f"{len(errors)} of {len(self.results)} commands failed; first error: {errors[0]}"
            if errors
            else "batch failed"
        )
