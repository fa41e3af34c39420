"""`window validate` writes the same reports as `gate`: --report, --checklist and --attest.

Runs the window on the simulated cluster of `tests/test_fleet_window.py` (its fixtures and helpers),
with a canary whose GPUs enumerate in reverse order.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from tests.test_fleet_window import JOB_OPTS, PLAN, WINDOW, Env, apply_change, baseline, changed, env
from upgrade_gate.fakenode import faults

pytest_plugins = ["tests.k8s.fixtures"]  # kube_cluster

__all__ = ["baseline", "env"]  # fixtures, used by name


def test_window_validate_writes_reports_with_checklist_and_attestations(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    st = ["--store", str(env.store)]
    assert env.cli("window", "plan", "--plan", str(PLAN), *st) == 0
    assert env.cli("window", "start", "--id", WINDOW, *st) == 0
    apply_change(env.cluster, env.root, changed("gpu-a-02"))
    apply_change(env.cluster, env.root, faults.reverse_enumeration(changed("gpu-b-02")))
    junit, markdown, html = env.root / "junit.xml", env.root / "report.md", env.root / "report.html"
    attest = ["--attest", "canary.mixed-precision=alice", "--attest", "canary.hsa-signals=alice"]
    args = ["--checklist", "canary", *attest, "--report", f"junit:{junit}", "--report", f"markdown:{markdown}"]
    capsys.readouterr()
    code = env.cli("window", "validate", "--id", WINDOW, *st, *JOB_OPTS, *args, "--report", f"html:{html}")
    assert code == 1
    assert f"wrote junit report to {junit}" in capsys.readouterr().err
    root = ET.parse(junit).getroot()
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    failing = [c.get("name") for c in suites["gpu-b-02"].iter("testcase") if c.find("failure") is not None]
    assert failing == ["device.order"]
    rows = {c.get("name"): c for c in suites["checklist"].iter("testcase")}
    assert rows["canary.device-order"].find("failure") is not None
    assert rows["canary.mixed-precision"].find("failure") is None  # attested
    text = markdown.read_text(encoding="utf-8")
    assert "### Causes" in text and "GPU enumeration order changed" in text and "### Checklist" in text
    assert "<h2>Causes</h2>" in html.read_text(encoding="utf-8")


def test_window_validate_refuses_a_bad_report_or_attestation(env: Env) -> None:
    st = ["--store", str(env.store)]
    assert env.cli("window", "validate", "--id", WINDOW, *st, "--report", "pdf:x.pdf") == 2
    assert env.cli("window", "validate", "--id", WINDOW, *st, "--attest", "no-equals-sign") == 2
