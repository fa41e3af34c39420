"""The one sanitiser of text that came from a node, a file or a user, before a terminal or a page shows it.

Tool output reaches finding messages, node names, device names, commit messages and paths; printed as
they are, its bytes drive the terminal: CSI (`ESC [`) moves the cursor and recolours, OSC (`ESC ]`)
sets the window title or writes the clipboard, DCS (`ESC P`) talks to the terminal itself, BEL rings,
and the C1 forms of those (U+009B, U+009D, U+0090), which UTF-8 terminals may honour too, need no ESC
at all. Rather than recognising sequences (a parser that misses one form lets it through), every
control character is shown: C0 (but the newline and tab where lines are kept), DEL and C1 as `\\xNN`,
and the bidirectional and line-separator formatting characters (which reorder or break what the eye
reads: "Trojan Source") as `\\uNNNN`. ESC shown as `\\x1b` disarms every sequence it would start.

- `one_line`: one line (newlines and tabs become spaces): console and text reports, error messages.
- `printable`: lines kept: multi-line output (usage errors, parse output).
- `json_printable`: a JSON text whose strings were dumped with `ensure_ascii=False` (which escapes C0
  but not DEL, C1 or the formatting characters): those escaped as `\\u00XX`, the document unchanged.
- `html_text`: `printable` and then HTML-escaped, for the HTML pages.

Standard library only: the CLI's error path imports it without the model.
"""

from __future__ import annotations

import html
import re

_FORMATTING = (0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
"""Bidi marks, embeddings, overrides and isolates; the Unicode line and paragraph separators."""

_VISIBLE = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))} | {c: f"\\u{c:04x}" for c in _FORMATTING}
_LINES = {c: v for c, v in _VISIBLE.items() if c not in (0x09, 0x0A)}
BEYOND_C0 = {c: v for c, v in _VISIBLE.items() if c >= 0x7F}
"""DEL, C1 and the formatting characters, shown (for `str.translate`): what XML allows and a terminal acts on."""
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f" + "".join(chr(c) for c in _FORMATTING) + "]")


def one_line(text: str) -> str:
    """`text` on one line with every control character visible as `\\xNN` (no terminal escapes pass)."""
    return text.replace("\r\n", " ").replace("\n", " ").replace("\t", " ").translate(_VISIBLE)


def printable(text: str) -> str:
    """`text` with its lines and tabs kept and every other control character visible (`\\r` too)."""
    return text.translate(_LINES)


def json_printable(text: str) -> str:
    """A JSON text with DEL, C1 and the formatting characters escaped (`\\u009b`): the same document."""
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def html_text(value: object) -> str:
    """`value` as text for an HTML page: control characters visible, markup escaped (quotes included)."""
    return html.escape(printable(str(value)))
