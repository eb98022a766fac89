"""Shell-like argument splitting, shared by inline requests and config lines.

Disque (like Redis) splits an inline request and a config file line with the
same rules: whitespace separates arguments; double quotes allow the escapes
``\\n \\r \\t \\b \\a \\\\ \\"`` and ``\\xHH``; single quotes allow ``\\'``; a
closing quote must be followed by whitespace or the end of the line. Empty
arguments (``""``) are kept here; the inline request reader drops them.
"""

from __future__ import annotations

_SPACE = frozenset(b" \n\r\t\v\f\0")
# An unquoted argument ends only at these (sdssplitargs' switch): a vertical tab
# or form feed inside it is kept, although both are skipped between arguments.
_UNQUOTED_END = frozenset(b" \n\r\t\0")
_HEX = frozenset(b"0123456789abcdefABCDEF")
_ESCAPES = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}


class UnbalancedQuotes(ValueError):
    """The line has an unterminated quote or a quote not followed by a space."""


def split_args(line: bytes) -> list[bytes]:
    """Split ``line`` into arguments; raise :class:`UnbalancedQuotes` on bad quoting."""
    if b'"' not in line and b"'" not in line and b"\v" not in line and b"\f" not in line:
        return line.split()  # the common case: no quoting at all
    args: list[bytes] = []
    n = len(line)
    i = 0
    while True:
        while i < n and line[i] in _SPACE:
            i += 1
        if i >= n:
            return args
        cur = bytearray()
        in_double = in_single = False
        while True:
            if in_double:
                if i >= n:
                    raise UnbalancedQuotes("unbalanced quotes")
                c = line[i]
                if (
                    c == 0x5C
                    and i + 3 < n
                    and line[i + 1] == ord("x")
                    and line[i + 2] in _HEX
                    and line[i + 3] in _HEX
                ):
                    cur.append(int(line[i + 2 : i + 4], 16))
                    i += 3
                elif c == 0x5C and i + 1 < n:
                    i += 1
                    cur.append(_ESCAPES.get(line[i], line[i]))
                elif c == ord('"'):
                    if i + 1 < n and line[i + 1] not in _SPACE:
                        raise UnbalancedQuotes("closing quote must be followed by a space")
                    i += 1
                    break
                else:
                    cur.append(c)
            elif in_single:
                if i >= n:
                    raise UnbalancedQuotes("unbalanced quotes")
                c = line[i]
                if c == 0x5C and i + 1 < n and line[i + 1] == ord("'"):
                    i += 1
                    cur.append(ord("'"))
                elif c == ord("'"):
                    if i + 1 < n and line[i + 1] not in _SPACE:
                        raise UnbalancedQuotes("closing quote must be followed by a space")
                    i += 1
                    break
                else:
                    cur.append(c)
            else:
                if i >= n:
                    break
                c = line[i]
                if c in _UNQUOTED_END:
                    break
                if c == ord('"'):
                    in_double = True
                elif c == ord("'"):
                    in_single = True
                else:
                    cur.append(c)
            i += 1
        args.append(bytes(cur))
