"""Small pure helpers shared by the text-like renderers (console, Markdown, JUnit); `one_line` is
`report.printable`'s."""

from __future__ import annotations

import json
from collections.abc import Iterable

from upgrade_gate.model import Finding, GateReport, NodeReport, Severity
from upgrade_gate.report.printable import BEYOND_C0
from upgrade_gate.report.printable import one_line as one_line  # the one sanitiser, re-exported

SEVERITY_ORDER = {Severity.BLOCK: 0, Severity.WARN: 1, Severity.INFO: 2}


def show_value(value: object) -> str:
    """A compact, stable one-line rendering of an expected/actual value."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def sorted_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Findings by severity (block first), then rule, device and message, for stable output."""
    return sorted(findings, key=lambda f: (SEVERITY_ORDER[f.severity], f.rule, f.device or "", f.message))


def counts(report: GateReport) -> dict[Severity, int]:
    """How many findings of each severity the report holds."""
    out = dict.fromkeys(Severity, 0)
    for finding in report.findings:
        out[finding.severity] += 1
    return out


def node_summary(node: NodeReport) -> str:
    """e.g. "BLOCK (2 block, 1 warn)"."""
    blocks = sum(1 for f in node.findings if f.severity is Severity.BLOCK)
    warns = sum(1 for f in node.findings if f.severity is Severity.WARN)
    return f"{node.verdict.value} ({blocks} block, {warns} warn)"


def xml_text(text: str) -> str:
    """`text` with every character XML 1.0 forbids (NUL, ESC, lone surrogates, U+FFFE/F), and those it allows
    but a terminal acts on (DEL, C1, bidi overrides), shown as `\\xNN`/`\\uNNNN`.

    ElementTree escapes markup but writes forbidden characters as they are, which makes the document
    not well-formed; tool output reaches finding messages, so every string goes through here.
    """
    out = []
    for ch in text.translate(BEYOND_C0):
        code = ord(ch)
        if code in (0x9, 0xA, 0xD) or 0x20 <= code <= 0xD7FF or 0xE000 <= code <= 0xFFFD or code >= 0x10000:
            out.append(ch)
        else:
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    return "".join(out)


def markdown_text(text: str) -> str:
    """`text` for a Markdown table cell or paragraph: HTML inert, no link/image syntax, one line."""
    import html

    escaped = html.escape(one_line(text), quote=False)
    for ch in ("\\", "`", "|", "[", "]"):
        escaped = escaped.replace(ch, "\\" + ch)
    return escaped


def markdown_code(text: str) -> str:
    """`text` inside a Markdown code span: HTML is literal there, so only the backticks must go."""
    return "`" + one_line(text).replace("`", "'") + "`"
