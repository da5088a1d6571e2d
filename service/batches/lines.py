"""An NDJSON file into numbered lines, numbered as `wc -l` and every editor number them; shared by the API and the CLI.

A line ends at `\\n` and only there (a `\\r` just before it is dropped, so CRLF files read the same). Not
`str.splitlines()`: it also breaks at a lone `\\r` and at U+2028, U+2029, U+0085 and `\\x1c`-`\\x1e`, which JSON
allows raw inside a string (`json.dumps(..., ensure_ascii=False)` writes U+2028 as is), so one sample would
become two bad lines and every later line would be numbered too far: a trainer mapping results back by `line` would
give later samples the wrong rewards. A UTF-8 byte-order mark at the start of the file is dropped, not read as part
of line 1. A last line without a final newline is still a line.

The same cut serves a streamed JSONL response (`LineCutter`), and what the service writes as JSONL escapes those
characters (`one_line`), so that a reader splitting with `splitlines()` (httpx's `iter_lines` does) still reads
one row per line.
"""

from __future__ import annotations

from collections.abc import Iterator

BYTE_ORDER_MARK = "\ufeff"
BREAKS_OTHER_READERS = "\x1c\x1d\x1e\x85\u2028\u2029"
"""Where `str.splitlines()` breaks a line that JSON does not escape (it escapes \\n, \\r, \\v and \\f)."""
_ESCAPED = str.maketrans({c: f"\\u{ord(c):04x}" for c in BREAKS_OTHER_READERS})


def without_bom(text: str) -> str:
    """The text without a leading byte-order mark (what Windows tools write before UTF-8 text)."""
    return text.removeprefix(BYTE_ORDER_MARK)


def numbered_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number from 1, line without its `\\n` or `\\r\\n`) for every line of `text`, blank ones included."""
    body = without_bom(text)
    if not body:
        return
    pieces = body.split("\n")
    if pieces[-1] == "":
        pieces.pop()  # the newline that ends the last line opens no new one
    for number, piece in enumerate(pieces, start=1):
        yield number, piece.removesuffix("\r")


def split_lines(text: str) -> list[str]:
    """The lines alone, in order: line N of the file is item N - 1."""
    return [line for _, line in numbered_lines(text)]


def one_line(json_text: str) -> str:
    """JSON text with the characters of BREAKS_OTHER_READERS written as escapes: the same value, and one line for
    any reader. Those characters can only stand inside strings (raw outside one, the text is not JSON), so the
    replacement is safe on the text."""
    return json_text.translate(_ESCAPED)


class LineCutter:
    """Lines out of text that arrives in chunks (a streamed response), cut as `numbered_lines` cuts a file."""

    def __init__(self) -> None:
        self._pending: list[str] = []

    def feed(self, chunk: str) -> list[str]:
        """The lines this chunk completes."""
        *complete, rest = chunk.split("\n")
        if complete:
            complete[0] = "".join([*self._pending, complete[0]])
            self._pending = []
        if rest:
            self._pending.append(rest)
        return [line.removesuffix("\r") for line in complete]

    def finish(self) -> list[str]:
        """The last line, when the text did not end with a newline."""
        last, self._pending = "".join(self._pending), []
        return [last.removesuffix("\r")] if last else []
