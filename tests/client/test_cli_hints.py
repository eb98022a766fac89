"""What disquette-cli adds to an error reply (cli/hints.py), without a server: the
argument that made ``ERR syntax error``, why CONFIG SET refused a value, near names,
and never an exception, whatever the command and the error (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disquette.cli.hints import hints, syntax_error, warnings
from disquette.cli.syntax import NAMES
from tests.support.fuzz import examples

RETRY_HINT = "unknown option 'RETRYY' for ADDJOB (did you mean RETRY?)"
NO_FROM = "GETJOB needs FROM before the queue names: GETJOB [options] FROM queue ..."


@pytest.mark.parametrize(
    ("argv", "found"),
    [
        (["ADDJOB", "q", "x", "0", "RETRYY", "5"], RETRY_HINT),
        (["addjob", "q", "x", "0", "ttl"], "TTL needs a value"),
        (["ADDJOB", "q", "x", "0", "TTL", "5", "ZZZ"], "unknown option 'ZZZ' for ADDJOB"),
        (["ADDJOB", "q", "x", "0", "BACKOFF", "fixed", "5", "ASYNC", "BOGUS"],
         "unknown option 'BOGUS' for ADDJOB"),
        (["GETJOB", "orders"], NO_FROM),
        (["GETJOB", "NOHANG", "FROM"], "no queue name after FROM"),
        (["GETJOB", "COUNTT", "3", "FROM", "q"],
         "unknown option 'COUNTT' before FROM (did you mean COUNT?)"),
        (["GETJOB", "TIMEOUT", "FROM", "q"], "TIMEOUT needs a value"),
        (["ADDJOB", "q", "x", "0", "REPLICATE", "2", "ASYNC"], None),  # nothing wrong it can see
        (["NOSUCH", "x"], None),
    ],
)  # fmt: skip
def test_the_argument_a_syntax_error_is_about(argv, found):
    assert syntax_error(argv) == found


def test_syntax_error_hints_end_with_the_usage():
    lines = hints(["QLEN"], "ERR wrong number of arguments for 'qlen' command")
    assert lines == ["usage: QLEN queue"]
    lines = hints(["GETJOB", "orders"], "ERR syntax error")
    assert lines[-1].startswith("usage: GETJOB [NOHANG] [TIMEOUT ms]")


def test_other_errors_and_near_names():
    refused = "ERR Invalid argument '1ms' for CONFIG SET 'timeout'"
    assert hints(["CONFIG", "SET", "timeout", "1ms"], refused) == [
        "timeout '1ms' is not a whole number of seconds; accepted: a whole number of seconds "
        "from 0 to 2147483647, or a number with a unit: us, ms, s, m (minutes), h or d "
        "(such as 15s)"
    ]
    assert hints(["QLNE", "q"], "ERR unknown command 'QLNE'") == [
        "no command QLNE (did you mean QLEN?)"
    ]
    assert hints(["XYZZY"], "ERR unknown command 'XYZZY'") == []
    assert hints(["PING"], "NOAUTH Authentication required.") == []


def test_options_after_from_warn():
    assert warnings(["getjob", "FROM", "q", "count", "3"])[0].startswith("'count' after FROM")
    assert warnings(["GETJOB", "COUNT", "3", "FROM", "q"]) == []
    assert warnings(["ADDJOB", "q", "FROM", "0"]) == []


WORDS = st.one_of(
    st.sampled_from([*NAMES, "FROM", "TIMEOUT", "COUNT", "RETRY", "BACKOFF", "fixed", "0", ""]),
    st.text(max_size=8),
)
ERRORS = st.one_of(
    st.sampled_from([
        "ERR syntax error", "ERR unknown command 'x'", "ERR Unsupported CONFIG parameter: x",
        "ERR wrong number of arguments for 'qlen' command",
    ]),
    st.builds(lambda v, n: f"ERR Invalid argument '{v}' for CONFIG SET '{n}'", st.text(max_size=6),
              st.sampled_from(["maxmemory", "hz", "dir", "client-output-buffer-limit", "nosuch"])),
    st.text(max_size=20),
)  # fmt: skip


@settings(max_examples=examples(1000))
@given(st.lists(WORDS, max_size=8), ERRORS)
def test_hints_never_fail(argv, error):
    assert all(isinstance(line, str) for line in hints(argv, error))
    assert all(isinstance(line, str) for line in warnings(argv))
