"""No control sequence from a node, a file or a user reaches a terminal or a page (issue 26, case 11):
CSI, OSC and DCS in both their ESC and C1 forms, BEL, DEL and the bidi overrides are shown, not sent,
by one sanitiser (`report.printable`), in every report format and on the CLI's own output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_cli_exit_codes import env_with, ug
from tests.test_report_hostile import _report
from upgrade_gate.errors import ExitCode
from upgrade_gate.model import GateReport, NodeName, NodeReport, Verdict, replace
from upgrade_gate.report.interface import ReportContext, ReportFormat
from upgrade_gate.report.printable import html_text, json_printable, one_line, printable
from upgrade_gate.report.registry import render

SEQUENCES = {
    "CSI": "\x1b[2J\x1b[31mred",
    "OSC title": "\x1b]0;pwned\x07",
    "OSC 52 clipboard": "\x1b]52;c;cm0gLXJmIH4K\x1b\\",
    "DCS": "\x1bP+q544e\x1b\\",
    "C1 CSI": "\x9b2J",
    "C1 OSC": "\x9d0;pwned\x9c",
    "C1 DCS": "\x90q\x9c",
    "BEL": "ring\x07",
    "DEL": "rub\x7fout",
    "bidi override": "abc\u202edcba\u2066x\u2069",
    "line separator": "one\u2028two",
}
RAW = [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))] + ["\u202e", "\u2066", "\u2069", "\u2028"]


def raw_controls(text: str, *, keep: str = "\n") -> list[str]:
    """The control characters in `text` a terminal would act on (`keep` excepted)."""
    return sorted({c for c in text if c in RAW and c not in keep})


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_one_line_and_printable_show_every_control_sequence(name: str) -> None:
    text = SEQUENCES[name]
    assert raw_controls(one_line(text), keep="") == []
    assert raw_controls(printable(text + "\nnext\tline"), keep="\n\t") == [] and "\nnext\tline" in printable(
        text + "\nnext\tline"
    )
    assert raw_controls(html_text(text), keep="") == []


def test_printable_shows_escapes_as_their_codes() -> None:
    assert one_line("\x1b]0;t\x07\x9b\u202e") == "\\x1b]0;t\\x07\\x9b\\u202e"
    assert printable("a\r\nb") == "a\\x0d\nb"


def test_json_printable_is_the_same_document() -> None:
    import json

    doc = {"name": "gpu\x9b2J\u202e\x7f\x1b", "ok": "°C ü"}
    text = json.dumps(doc, ensure_ascii=False)
    safe = json_printable(text)
    assert raw_controls(safe, keep="") == [] and json.loads(safe) == doc and "°C ü" in safe


def hostile(text: str) -> GateReport:
    """`test_report_hostile`'s report, its node named with `text` as well."""
    report = _report(text)
    node = report.nodes[0]
    name = NodeName(f"node-{text}")
    findings = tuple(replace(f, node=name) for f in node.findings)
    return replace(report, nodes=(NodeReport(node=name, verdict=Verdict.BLOCK, findings=findings),))


@pytest.mark.parametrize("fmt", [ReportFormat.CONSOLE, ReportFormat.MARKDOWN, ReportFormat.JUNIT, ReportFormat.HTML])
@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_every_text_format_is_inert(fmt: ReportFormat, name: str) -> None:
    from upgrade_gate.report.interface import ConsoleDetail

    for detail in ConsoleDetail if fmt is ReportFormat.CONSOLE else (ConsoleDetail.CAUSES,):
        out = render(fmt, ReportContext(report=hostile(SEQUENCES[name]), color=False, detail=detail))
        assert raw_controls(out) == [], (fmt, detail, name)


def test_html_report_escapes_esc_and_bel_like_the_other_formats() -> None:
    page = render(ReportFormat.HTML, ReportContext(report=hostile("\x1b]0;pwned\x07")))
    assert "\x1b" not in page and "\x07" not in page
    assert "\\x1b]0;pwned\\x07" in page


def test_fleet_summary_is_inert() -> None:
    from upgrade_gate.cli.gate_stream import console_summary

    text = console_summary(hostile(SEQUENCES["OSC title"] + SEQUENCES["C1 CSI"]), reports=[])
    assert raw_controls(text) == [] and "\\x1b]0;pwned\\x07" in text


# --------------------------------------------------------------------------- the CLI's own output


def test_cli_error_message_shows_escapes_in_a_path(tmp_path: Path) -> None:
    bad = tmp_path / "x\x1b]0;pwned\x07\x9b2J.json"
    proc = ug("diff", str(bad), str(bad))
    assert proc.returncode == ExitCode.BAD_INPUT
    assert raw_controls(proc.stderr) == [] and "x\\x1b]0;pwned\\x07\\x9b2J.json" in proc.stderr


def test_cli_usage_error_shows_escapes_in_the_users_words() -> None:
    proc = ug("no-such\x1b]0;pwned\x07")
    assert proc.returncode == ExitCode.USAGE
    assert raw_controls(proc.stderr) == [] and "no-such\\x1b]0;pwned\\x07" in proc.stderr


def test_diff_output_is_inert(tmp_path: Path) -> None:
    from msgspec.structs import replace as struct_replace

    from tests.judge_scenarios import mi300x_snapshot
    from upgrade_gate.snapshot.io import write_snapshot

    base = mi300x_snapshot()
    cand = struct_replace(base, software=struct_replace(base.software, kernel="6.8\x1b]0;pwned\x07\x9b2J\u202e"))
    write_snapshot(base, tmp_path / "b.json")
    write_snapshot(cand, tmp_path / "c.json")
    for extra in ([], ["--json"]):
        proc = ug("diff", str(tmp_path / "b.json"), str(tmp_path / "c.json"), *extra)
        assert proc.returncode == ExitCode.BLOCK, proc.stderr
        assert "pwned" in proc.stdout and raw_controls(proc.stdout) == [], extra


@pytest.mark.parametrize(
    ("tool", "text"),
    [
        ("rocm-smi", "GPU[0]\t\t: Card series:\t\tAMD \x9b2J\u202e\n"),
        ("rocminfo", "Agent 1\n  Name: gfx942\x1b]0;x\x07\n"),
    ],
)
def test_parse_output_is_inert(tool: str, text: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "upgrade_gate", "parse", "--tool", tool, "-"],
        input=text,
        capture_output=True,
        text=True,
        env=env_with(),
        timeout=120,
        check=False,
    )
    assert raw_controls(proc.stdout) == [] and raw_controls(proc.stderr) == [], proc.stdout + proc.stderr
    if tool == "rocm-smi":
        assert proc.returncode == ExitCode.PASS and "AMD \\u009b2J\\u202e" in proc.stdout, proc.stdout


def test_baseline_show_log_and_diff_are_inert(tmp_path: Path) -> None:
    from msgspec.structs import replace as struct_replace

    from tests.judge_scenarios import mi300x_snapshot
    from upgrade_gate.store.gitstore import BaselineStore

    hostile_text = "6.8\x1b]0;pwned\x07\x9b2J\u202e"
    base = mi300x_snapshot()
    changed = struct_replace(base, software=struct_replace(base.software, kernel=hostile_text))
    store = tmp_path / "store"
    with BaselineStore(store) as st:
        st.save([base], tag="v1")
        st.save([changed], tag="v2", message=f"kernel {hostile_text}")
    name = base.node.name
    for args in (["show", f"{name}@v2"], ["log", name], ["diff", name, "v1", "v2"]):
        proc = ug("baseline", *args, "--store", str(store))
        assert proc.returncode in (ExitCode.PASS, ExitCode.BLOCK), (args, proc.stderr)
        assert "pwned" in proc.stdout and raw_controls(proc.stdout) == [], (args, proc.stdout)


def test_capture_probe_lines_are_inert(tmp_path: Path) -> None:
    from tests.test_collect_capture import fake_node

    bindir, _ = fake_node(tmp_path, rocminfo="printf 'broken \\033]0;pwned\\007 \\302\\233 2J\\n' >&2\nexit 3")
    proc = subprocess.run(
        [sys.executable, "-m", "upgrade_gate", "capture", "--node", "n1", "--out", str(tmp_path / "b.tar.gz")],
        capture_output=True,
        text=True,
        env=env_with(PATH=str(bindir)),
        timeout=300,
        check=False,
    )
    both = proc.stdout + proc.stderr
    assert "rocminfo" in both and raw_controls(both) == [], both


def test_validate_dry_run_plan_is_inert(tmp_path: Path) -> None:
    cfg = tmp_path / "cvf\x1b]0;pwned\x07\x9b2J.yaml"
    cfg.write_bytes(
        (Path(__file__).resolve().parents[1] / "examples" / "cvf" / "cluster-validation-config.yaml").read_bytes()
    )
    proc = ug("validate", "--dry-run", "--phases", "0", "--config", str(cfg))
    assert proc.returncode == ExitCode.PASS, proc.stderr
    assert raw_controls(proc.stdout) == [] and "cvf\\x1b]0;pwned\\x07\\x9b2J.yaml" in proc.stdout
