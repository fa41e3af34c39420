"""`capture` with the REAL rocminfo and rocm-smi of Debian (ROCm 5.2.3) on a host without the amdgpu driver.

CI installs Debian's `rocminfo` and `rocm-smi` (.ci/run) and has no amdgpu driver: both tools fail the
way a node with a broken driver does. The gate must block and name the cause each tool printed
(rocminfo on stdout, in red; rocm-smi on stderr, with exit code 0), not the libkmod noise rocminfo
writes to stderr. The same causes are in the corpus from a ROCm 6.2.3 node (rocminfo/error-rock-module-
NOT-loaded-..., rocm-smi/error-driver-not-initialized-...).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import CORPUS, needs_corpus
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.causes import known_cause
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import Verdict
from upgrade_gate.snapshot.build import build_snapshot

_TOOLS = ("rocminfo", "rocm-smi")
_ROCK = "ROCk module is NOT loaded, possibly no GPU devices"
_DRIVER = "Driver not initialized (amdgpu not found in modules)"


def _real_tools_or_skip() -> None:
    missing = [t for t in _TOOLS if shutil.which(t) is None]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI must have Debian's {', '.join(missing)} (.ci/run installs them)")
        pytest.skip(f"real {', '.join(missing)} not installed (apt-get install rocminfo rocm-smi)")
    if Path("/sys/module/amdgpu").exists():
        pytest.skip("this host has the amdgpu driver: the real tools do not fail here")


def test_capture_with_real_rocm_tools_blocks_naming_each_tools_cause(tmp_path: Path) -> None:
    _real_tools_or_skip()
    bundle = capture(LocalRunner(), node="real-tools", timeout=60.0)
    rocminfo = bundle.record("rocminfo")
    assert rocminfo is not None and not rocminfo.ok
    assert rocminfo.reason == f"rocminfo: exit code 1: {_ROCK}"  # not libkmod's "could not get list of modules"

    snapshot = build_snapshot(bundle)
    statuses = {p.name: p for p in snapshot.probes}
    assert statuses["rocmsmi"].ok is False
    assert statuses["rocmsmi"].reason is not None and statuses["rocmsmi"].reason.startswith(f"ERROR:root:{_DRIVER}")
    assert snapshot.gpus == ()

    report = judge(baselines={}, candidates=[snapshot], plan=None, policy=load_policy(), now="2026-12-01T00:00:00Z")
    assert report.verdict is Verdict.BLOCK
    messages = [f.message for f in report.findings if f.rule == "evidence.missing"]
    assert any(m == f"probe rocminfo failed: rocminfo: exit code 1: {_ROCK}" for m in messages), messages
    assert any(m.startswith(f"probe rocmsmi failed: ERROR:root:{_DRIVER}") for m in messages), messages
    assert not any("could not get list of modules" in m for m in messages)


@needs_corpus
@pytest.mark.parametrize(
    ("path", "stream", "cause"),
    [
        ("rocminfo/error-rock-module-NOT-loaded-4x-mi210-rocm6.2.3.txt", "stdout", _ROCK),
        (
            "rocm-smi/error-driver-not-initialized-amdgpu-not-in-modules-4x-mi210-rocm6.2.3.txt",
            "stderr",
            f"ERROR:root:{_DRIVER}",
        ),
        (
            "rocminfo/error-rocm3.x-kfd-cannot-allocate-memory.txt",
            "stdout",
            "Unable to open /dev/kfd read-write: Cannot allocate memory",
        ),
        (
            "rocminfo/error-rx9070xt-rocm7.2.1-agent-creation-failed-unrecognized-id.txt",
            "stdout",
            "Warning: Agent creation failed.",
        ),
    ],
)
def test_known_cause_on_the_corpus_failure_outputs(path: str, stream: str, cause: str) -> None:
    text = (CORPUS / path).read_text(encoding="utf-8")
    out, err = (text, "") if stream == "stdout" else ("", text)
    assert known_cause(out, err) == cause


def test_known_cause_reads_the_red_stdout_line_past_stderr_noise() -> None:
    """rocminfo 5.2.3 on this kind of host, byte for byte."""
    stdout = f"\x1b[31m{_ROCK}\x1b[0m\n"
    stderr = (
        "libkmod: ERROR ../libkmod/libkmod-module.c:1725 kmod_module_new_from_loaded: could not open "
        "/proc/modules: No such file or directory\nError: could not get list of modules: No such file or directory\n"
    )
    assert known_cause(stdout, stderr) == _ROCK
    assert known_cause("", "something else\n") is None


def test_thermal_sampling_with_the_real_rocm_smi_fails_closed_naming_its_cause(tmp_path: Path) -> None:
    """Phase 2's thermal sampling on this host's own tools: amd-smi absent, Debian's real rocm-smi
    without a driver. No reading is invented; the problem names both tools."""
    _real_tools_or_skip()
    if shutil.which("amd-smi") is not None:
        pytest.skip("amd-smi is installed here: the fallback path is not the one under test")
    from tests.test_validate_support import fast_config, healthy_spec, make_node, snapshot_of
    from upgrade_gate.model import NodeName
    from upgrade_gate.validate.launcher import LocalLauncher
    from upgrade_gate.validate.phase import PhaseContext
    from upgrade_gate.validate.phases.thermal import sample_thermal

    node = NodeName("node-01")
    snap = snapshot_of(make_node(tmp_path, healthy_spec()))  # the GPUs a reading would be placed on
    ctx = PhaseContext(node=node, config=fast_config(), launcher=LocalLauncher({node: dict(os.environ)}), snapshot=snap)
    with sample_thermal(ctx, interval_s=0.05, max_during=2, timeout_s=30.0) as record:
        pass
    assert [s.when for s in record.samples] == ["before"]  # neither tool answered: nothing more is tried
    assert all(not s.readings for s in record.samples)
    (problem,) = record.problems
    assert "amd-smi failed" in problem and "rocm-smi too" in problem, problem
    assert f"rocm-smi too (rocm-smi: ERROR:root:{_DRIVER}" in problem, problem  # its own cause, not "invalid JSON"
