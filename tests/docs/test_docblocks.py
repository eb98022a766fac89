"""The doctest format without processes: extraction, sessions, matching, ports.

``tests/support/docblocks.py`` decides which blocks of a page run and whether
what they printed matches the page; a mistake there would pass wrong examples
(or fail right ones) silently, so it is tested on its own, the ``...`` matcher
with hypothesis.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support import docblocks
from tests.support.docblocks import Command, FormatError, matches, parse

# Lines as a command prints them: no newline, no trailing space, no "..." of their own.
LINE = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=12).map(
    lambda s: s.replace("...", "").rstrip()
)
LINES = st.lists(LINE, max_size=8)


def page(*lines: str) -> str:
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- extraction


def test_run_and_other_blocks() -> None:
    document = parse(
        page(
            "# Title",
            "```sh",
            "make run",
            "```",
            "```text",
            "not run",
            "```",
            "```",
            "no info string",
            "```",
            "```python title='x'",
            "print(1)",
            "```",
            "```console",
            "$ echo hi",
            "hi",
            "```",
        )
    )
    assert document.nodes == 3
    assert [(b.line, b.info, b.kind) for b in document.blocks] == [
        (2, "sh", "script"),
        (5, "text", "text"),
        (8, "", "text"),
        (11, "python", "python"),
        (14, "console", "session"),
    ]
    assert [b.line for b in document.runnable] == [2, 11, 14]
    assert document.blocks[3].source == "print(1)\n"


def test_skip_output_and_nodes_directives() -> None:
    document = parse(
        page(
            "<!-- doctest: nodes 1 -->",
            "<!-- doctest: skip: runs in the foreground -->",
            "```sh",
            "make run",
            "```",
            "```python",
            "print('a')",
            "```",
            "prints",
            "<!--doctest:output-->",
            "```text",
            "a",
            "```",
        )
    )
    assert document.nodes == 1
    skipped, program = document.blocks
    assert skipped.skip == "runs in the foreground" and not skipped.runs
    assert program.expected == ("a",) and program.runs


def test_clean_directive() -> None:
    assert parse(page("<!-- doctest: clean -->", "```sh", "x", "```")).clean
    assert not parse(page("```sh", "x", "```")).clean


def test_indented_fence_in_a_list() -> None:
    document = parse(page("- item:", "", "  ```sh", "  echo a", "    echo b", "  ```"))
    assert document.blocks[0].source == "echo a\n  echo b\n"


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        (page("<!-- doctest: skip: why -->", "", "```sh", "x", "```"), "right before"),
        (page("<!-- doctest: skip: why -->"), "right before"),
        (page("<!-- doctest: skip: -->", "```sh", "x", "```"), "unknown"),
        (page("<!-- doctest: fails -->", "```sh", "x", "```"), "unknown"),
        (page("<!-- doctest: skip: why -->", "```text", "x", "```"), "only sh"),
        (page("```sh", "x", "```", "<!-- doctest: output -->", "```text", "a", "```"), "follows"),
        (page("```python", "x", "```", "<!-- doctest: output -->", "```", "a", "```"), "follows"),
        (
            page(
                "```python", "x", "```", *(["<!-- doctest: output -->", "```text", "a", "```"] * 2)
            ),
            "follows",
        ),
        (page("<!-- doctest: nodes 4 -->"), "nodes N"),
        (page("<!-- doctest: nodes 1 -->", "<!-- doctest: nodes 2 -->"), "second"),
        (page("```sh", "x"), "never closed"),
    ],
)
def test_format_errors(text: str, complaint: str) -> None:
    with pytest.raises(FormatError, match=complaint):
        parse(text)


def test_session_commands_and_output() -> None:
    source = page(
        "$ job=$(disquette-cli ADDJOB q body 0)",
        "$ disquette-cli GETJOB \\",
        "    FROM q",
        '1) 1) "q"   ',
        "",
        "$ echo done",
        "done",
        "",
    )
    assert docblocks.parse_session(source, 10) == [
        Command(10, "job=$(disquette-cli ADDJOB q body 0)", ()),
        Command(11, "disquette-cli GETJOB \\\n    FROM q", ('1) 1) "q"',)),
        Command(15, "echo done", ("done",)),
    ]


def test_a_script_is_one_command_not_compared() -> None:
    (block,) = parse(page("```sh", "mkdir a", "cd a", "```")).blocks
    assert block.commands() == [Command(2, "mkdir a\ncd a\n", None)]


def test_output_before_the_first_command() -> None:
    with pytest.raises(FormatError, match="before the first command"):
        docblocks.parse_session(page("hello", "$ echo"))


# ------------------------------------------------------------------ terminal


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain\r\nline\r\n", "plain\nline\n"),
        ("\rmeeting [###] 50%\x1b[K\r\x1b[Kready\r\n", "ready\n"),
        ("abcdef\rXY\n", "XYcdef\n"),
        ("abcdef\rXY\x1b[K\n", "XY\n"),
        ("ab\x1b[31mc\x1b[0m\n", "abc\n"),
        ("abc\bd\n", "abd\n"),
    ],
)
def test_terminal(raw: str, shown: str) -> None:
    assert docblocks.terminal(raw) == shown


def test_output_lines_drop_trailing_spaces_and_empty_lines() -> None:
    assert docblocks.output_lines("a  \n\nb \n\n\n") == ("a", "", "b")


# ------------------------------------------------------------------ matching


@pytest.mark.parametrize(
    ("expected", "actual", "result"),
    [
        ("D-...-05a1", "D-3f1c09a2-1VYWtE1mcK0m9ZAl1L1ivWdY-05a1", True),
        ("D-...-05a1", "D-3f1c09a2-1VYWtE1mcK0m9ZAl1L1ivWdY-05a2", False),
        ("in ...s (.../s)", "in 0.00s (623/s)", True),
        ("...       127.0.0.1:7711  up", "5cdf08ad  127.0.0.1:7711  up", True),
        ("1         ...  up", "1         0     0       2        up", True),
        ("a ... b", "ab", False),
        ("a.b", "axb", False),  # only "..." is special
        ("(1+1)", "(1+1)", True),
        # Four dots: an ellipsis after a dot, or before one (hypothesis found ".0").
        ("....", ".0", True),
        ("....", "0.", True),
        ("x....", "y.", False),
    ],
)
def test_line_matches(expected: str, actual: str, result: bool) -> None:
    assert docblocks.line_matches(expected, actual) is result


def test_lines_wildcard() -> None:
    assert matches(["a", "...", "z"], ["a", "z"])
    assert matches(["a", "...", "z"], ["a", "b", "c", "z"])
    assert not matches(["a", "...", "z"], ["a", "b"])
    assert matches(["...", "b", "..."], ["a", "b", "c"])
    assert not matches(["a"], ["a", "b"])
    assert not matches(["a", "b"], ["a"])
    assert matches([], [])


@given(LINES)
def test_lines_match_themselves(lines: list[str]) -> None:
    assert matches(lines, lines)


@given(LINES)
def test_a_lone_ellipsis_matches_anything(lines: list[str]) -> None:
    assert matches(["..."], lines)


@given(LINES, st.data())
def test_eliding_part_of_a_line_still_matches(lines: list[str], data: st.DataObject) -> None:
    if not lines:
        return
    i = data.draw(st.integers(0, len(lines) - 1))
    line = lines[i]
    start = data.draw(st.integers(0, len(line)))
    end = data.draw(st.integers(start, len(line)))
    expected = [*lines[:i], line[:start] + "..." + line[end:], *lines[i + 1 :]]
    assert matches(expected, lines)


@given(LINES, st.data())
def test_eliding_lines_still_matches(lines: list[str], data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(lines)))
    end = data.draw(st.integers(start, len(lines)))
    assert matches([*lines[:start], "...", *lines[end:]], lines)


@given(LINES, LINES)
def test_without_ellipsis_only_equal_lines_match(expected: list[str], actual: list[str]) -> None:
    assert matches(expected, actual) == (expected == actual)


@given(LINES, LINE, st.data())
def test_an_extra_line_is_a_difference(lines: list[str], extra: str, data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(lines)))
    assert not matches(lines, [*lines[:i], extra, *lines[i:]])


def test_diff_names_both_sides() -> None:
    text = docblocks.diff(["a", "b"], ["a", "c"])
    assert "--- expected" in text and "+++ actual" in text and "-b" in text and "+c" in text


# --------------------------------------------------------------------- ports


def test_ports_rewritten_there_and_back() -> None:
    mapping = docblocks.port_map([4101, 4102, 4103])
    assert mapping == {7711: 4101, 8711: 5101, 17711: 14101, 7712: 4102, 8712: 5102,
                       17712: 14102, 7713: 4103, 8713: 5103, 17713: 14103}  # fmt: skip
    text = (
        "redis-cli -p 7711; meet 127.0.0.1 7712; bus 127.0.0.1:7713@17713; 77110 27711; "
        "http://127.0.0.1:8712/"
    )
    rewritten = docblocks.rewrite_ports(text, mapping)
    assert rewritten == (
        "redis-cli -p 4101; meet 127.0.0.1 4102; bus 127.0.0.1:4103@14103; 77110 27711; "
        "http://127.0.0.1:5102/"
    )
    assert docblocks.rewrite_ports(rewritten, docblocks.inverse(mapping)) == text


def _apart(ports: list[int]) -> bool:
    """No port, HTTP port or bus port of one equals another's (as pick_ports picks)."""
    numbers = [p + offset for p in ports for offset in (0, 1000, 10000)]
    return len(set(numbers)) == len(numbers)


@given(
    st.lists(st.integers(1024, 8999), min_size=3, max_size=3, unique=True).filter(_apart),
    st.text(),
)
def test_rewriting_back_restores_the_documented_ports(ports: list[int], noise: str) -> None:
    mapping = docblocks.port_map(ports)
    digits_free = "".join(c for c in noise if not c.isdigit())
    text = f"{digits_free} 7711 {digits_free}:7712@17712 7713 8711"
    back = docblocks.rewrite_ports(
        docblocks.rewrite_ports(text, mapping), docblocks.inverse(mapping)
    )
    assert back == text
