"""Redis's glob matcher (``stringmatchlen``), used by CONFIG GET.

CONFIG GET matches its pattern against parameter names with Redis's own
glob, not POSIX ``fnmatch``: ``*`` and ``?`` as usual; ``[abc]``, ranges
``[a-z]`` (either order, ``[z-a]`` works too) and negation with ``[^...]``
(``!`` is *not* a negation); a backslash escapes the next character, inside or
outside brackets; an unterminated ``[`` class simply ends at the end of the
pattern. :func:`fnmatch.fnmatchcase` differs on ``[!..]``, escapes and
unterminated classes, hence this transcription.

The C code reads one byte past the end of the pattern in two corner cases
(a trailing backslash inside a class); here those reads see a NUL byte and
the class ends, which is what the C code does in practice. A memo keeps
patterns full of ``*`` from taking exponential time.
"""

from __future__ import annotations


def stringmatch(pattern: bytes, string: bytes, nocase: bool = False) -> bool:
    """Return whether ``string`` matches the glob ``pattern`` (Redis semantics)."""
    plen_total = len(pattern)
    slen_total = len(string)
    memo: dict[tuple[int, int], bool] = {}

    def pat(i: int) -> int:
        return pattern[i] if 0 <= i < plen_total else 0

    def fold(c: int) -> int:
        return c + 32 if nocase and 0x41 <= c <= 0x5A else c

    def match(p: int, s: int) -> bool:
        """Match ``pattern[p:]`` against ``string[s:]``."""
        key = (p, s)
        cached = memo.get(key)
        if cached is not None:
            return cached
        result = _match(p, s)
        memo[key] = result
        return result

    def _match(p: int, s: int) -> bool:
        plen = plen_total - p
        slen = slen_total - s
        while plen > 0:
            c = pattern[p]
            if c == 0x2A:  # '*'
                while pat(p + 1) == 0x2A and plen > 1:
                    p += 1
                    plen -= 1
                if plen == 1:
                    return True
                while slen > 0:
                    if match(p + 1, s):
                        return True
                    s += 1
                    slen -= 1
                return False
            if c == 0x3F:  # '?'
                if slen == 0:
                    return False
                s += 1
                slen -= 1
            elif c == 0x5B:  # '['
                p += 1
                plen -= 1
                negate = pat(p) == 0x5E
                if negate:
                    p += 1
                    plen -= 1
                matched = False
                sc = string[s] if slen > 0 else 0
                while True:
                    if plen <= 0:
                        # Unterminated class: stop on the last pattern byte.
                        p -= 1
                        plen += 1
                        break
                    pc = pattern[p]
                    if pc == 0x5C:  # '\\'
                        p += 1
                        plen -= 1
                        if plen > 0 and pattern[p] == sc:
                            matched = True
                    elif pc == 0x5D:  # ']'
                        break
                    elif pat(p + 1) == 0x2D and plen >= 3:  # a range "x-y"
                        start, end = pc, pattern[p + 2]
                        if start > end:
                            start, end = end, start
                        ch = sc
                        if nocase:
                            start, end, ch = fold(start), fold(end), fold(ch)
                        p += 2
                        plen -= 2
                        if start <= ch <= end:
                            matched = True
                    elif fold(pc) == fold(sc):
                        matched = True
                    p += 1
                    plen -= 1
                if negate:
                    matched = not matched
                if not matched:
                    return False
                s += 1
                slen -= 1
            else:
                if c == 0x5C and plen >= 2:  # '\\' escapes the next byte
                    p += 1
                    plen -= 1
                    c = pattern[p]
                if slen == 0 or fold(c) != fold(string[s]):
                    return False
                s += 1
                slen -= 1
            p += 1
            plen -= 1
            if slen == 0:
                while pat(p) == 0x2A:
                    p += 1
                    plen -= 1
                break
        return plen <= 0 and slen == 0

    return match(0, 0)
