"""disquette-cli's command table: ``help COMMAND`` and tab completion, without a server."""

from __future__ import annotations

from disquette.cli.syntax import COMMANDS, Completer, candidates, help_text, lookup


def test_help_shows_every_subcommand_or_one():
    text = help_text(["qpolicy"])
    for sub in ("SET", "DEL", "LIST", "GET", "MATCH"):
        assert f"\n  QPOLICY {sub}" in text
    assert "[MAX-NACKS count]" in text and "[DEADLETTER queue]" in text
    (entry,) = lookup(["QPOLICY", "match"])
    assert help_text(["QPOLICY", "match"]) == (
        f"\n  QPOLICY MATCH queue\n  summary: {entry.summary}\n  group: policies\n\n"
    )
    assert "[PRIORITY 0-9] [DEDUP key]" in help_text(["addjob"])
    assert "[PRIORITY 0-9]" in help_text(["jscan"])
    assert "no help for 'nosuch'" in help_text(["nosuch"])


def test_completion_of_names_subcommands_and_options():
    assert candidates([], "qpo") == ["qpolicy"]
    assert candidates([], "QP") == ["QPEEK", "QPOLICY"]
    assert candidates(["qpolicy"], "") == ["set", "del", "list", "get", "match"]
    assert candidates(["QPOLICY"], "M") == ["MATCH"]
    assert candidates(["qpolicy", "set", "p", "q-*"], "max") == [
        "maxlen",
        "max-nacks",
        "max-deliveries",
    ]
    assert candidates(["QPOLICY", "SET", "p"], "DEAD") == ["DEADLETTER"]
    assert candidates(["addjob", "q", "body", "0"], "") == [
        "replicate", "delay", "retry", "ttl", "maxlen", "async", "priority", "dedup", "after",
        "ifgone", "backoff",
    ]  # fmt: skip
    assert candidates(["ADDJOB", "q", "body", "0"], "D") == ["DELAY", "DEDUP"]
    assert candidates(["jscan"], "pr") == ["priority"]
    assert candidates(["nosuch"], "") == []
    assert candidates(["qpolicy", "nosuch"], "") == []


def test_every_entry_has_a_summary_and_a_group():
    names = [c.name for c in COMMANDS]
    assert len(names) == len(set(names))
    assert all(c.summary and c.group for c in COMMANDS)


class FakeReadline:
    """What the completer asks readline: the line so far and where the word begins."""

    def __init__(self, line: str) -> None:
        self.line = line

    def get_line_buffer(self) -> str:
        return self.line

    def get_begidx(self) -> int:
        return len(self.line) - len(self.line.split(" ")[-1])


def test_the_readline_completer_protocol():
    completer = Completer(FakeReadline("qpolicy m"))
    assert completer.complete("m", 0) == "match "
    assert completer.complete("m", 1) is None
    completer = Completer(FakeReadline("addjob q b 0 DE"))
    assert [completer.complete("DE", n) for n in range(3)] == ["DELAY ", "DEDUP ", None]


def test_the_coordination_syntax():
    """Issue 16: AFTER/IFGONE, WITHCLAIM, CLAIM, WORKING's text, JOBLOG."""
    assert "[AFTER id ...] [IFGONE fail|release]" in help_text(["addjob"])
    assert "[WITHCLAIM]" in help_text(["getjob"])
    assert "\n  ACKJOB id [CLAIM n] [RESULT value] [id [CLAIM n] [RESULT value] ...]\n" in (
        help_text(["ackjob"])
    )
    assert "\n  NACK id [CLAIM n] [id [CLAIM n] ...] [DELAY sec]\n" in help_text(["nack"])
    assert "\n  WORKING id [CLAIM n] [text]\n" in help_text(["working"])
    assert "\n  JOBLOG id\n" in help_text(["joblog"])
    assert candidates([], "jobl") == ["joblog"]
    assert candidates(["ADDJOB", "q", "b", "0"], "AF") == ["AFTER"]
    assert candidates(["addjob", "q", "b", "0", "after", "D-1"], "ifg") == ["ifgone"]
    assert candidates(["getjob"], "withc") == ["withcounters", "withclaim"]
    assert candidates(["ackjob", "D-1"], "") == ["claim", "result"]
    assert candidates(["working", "D-1"], "C") == ["CLAIM"]


def test_the_job_outcome_syntax():
    """Issue 24: WAITJOB, CANCEL, RESULT, NACK's DELAY, BACKOFF, the policy options."""
    assert "\n  WAITJOB id [TIMEOUT ms]\n" in help_text(["waitjob"])
    assert "\n  CANCEL id [id ...]\n" in help_text(["cancel"])
    assert candidates([], "wa") == ["waitjob"]
    assert candidates([], "CAN") == ["CANCEL"]
    assert candidates(["waitjob", "D-1"], "") == ["timeout"]
    assert candidates(["nack", "D-1"], "d") == ["delay"]
    assert candidates(["ackjob", "D-1"], "R") == ["RESULT"]
    assert candidates(["addjob", "q", "b", "0"], "back") == ["backoff"]
    assert "[BACKOFF fixed sec|exponential base-sec cap-sec]" in help_text(["addjob"])
    assert candidates(["qpolicy", "set", "p", "q*"], "back") == [
        "backoff",
        "backoff-base",
        "backoff-cap",
    ]
    assert candidates(["QPOLICY", "SET", "p", "q*"], "O") == ["OVERFLOW"]
    assert "[OVERFLOW refuse|drop-oldest]" in help_text(["qpolicy", "set"])
