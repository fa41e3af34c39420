"""examples/: the plan, policies and CVF ConfigMap load with the real loaders; the CI jobs' commands run.

The CI examples are run as written: the shell of each step (GitHub) or the `script:` (GitLab) that
invokes upgrade-gate is executed by bash in a folder laid out as the examples expect (plans/,
policies/, cvf/, bundles/, baselines/), with bundles captured from fake nodes and a baseline store
saved from validated fake nodes, exactly as an operator would produce them. Installing steps are not
run: the package under test is on PATH.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from upgrade_gate.cli.collect_cmds import parser_check
from upgrade_gate.cli.judge_cmds import read_cvf_config
from upgrade_gate.collect.bundle import write_bundle
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.demo.fleet import ROCM_6_1_3, ROCM_6_2_0, gather, node_names, node_spec
from upgrade_gate.fakenode import NodeSpec, build_fake_node, faults
from upgrade_gate.judge.plan import load_plan
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import NodeName, Severity
from upgrade_gate.store.gitstore import BaselineStore
from upgrade_gate.validate.config import default_config, load_cvf_config

EXAMPLES = Path(__file__).parent.parent / "examples"
PLAN = EXAMPLES / "plans" / "rocm-6.1.3-to-6.2.0.yaml"
STRICT = EXAMPLES / "policies" / "strict.yaml"
CI_POLICY = EXAMPLES / "policies" / "ci-bundles.yaml"
CONFIGMAP = EXAMPLES / "cvf" / "cluster-validation-config.yaml"
GITHUB = EXAMPLES / "github-actions" / "rocm-bump-gate.yml"
GITLAB = EXAMPLES / "gitlab-ci" / "rocm-bump-gate.yml"
INVOKES = re.compile(r"\bupgrade-gate\s+(gate|capture|snapshot|baseline|validate|diff|demo)\b")


# --------------------------------------------------------------------------- loaders


def test_examples_plan_loads_with_the_real_loader() -> None:
    plan = load_plan(PLAN)
    assert plan.id == "rocm-6.1.3-to-6.2.0"
    assert plan.change.rocm is not None and (plan.change.rocm.from_version, plan.change.rocm.to_version) == (
        "6.1.3",
        "6.2.0",
    )
    assert plan.change.driver is not None and plan.change.driver.to_version == "6.8.5"
    assert (plan.canaries.max_fraction, plan.canaries.min_nodes, plan.canaries.cap) == (0.10, 1, 4)


def test_examples_strict_policy_loads_over_the_default() -> None:
    policy = load_policy(STRICT)
    assert policy.name == "strict"
    assert policy.thresholds.mesh_avg_busbw_min_gbs == 110
    identity = policy.rule_for("identity.unverified", "mi300x-8gpu")
    regression = policy.rule_for("bandwidth.regression", "mi300x-8gpu")
    assert identity is not None and identity.severity is Severity.BLOCK
    assert regression is not None and regression.number("tolerance") == 0.05
    assert policy.rule_for("device.order_changed", None) is not None  # inherited from the default


def test_examples_ci_policy_drops_only_phases_and_bandwidth() -> None:
    policy = load_policy(CI_POLICY)
    evidence = policy.rule_for("evidence.missing", "mi300x-8gpu")
    assert evidence is not None and evidence.enabled and evidence.integers("required_phases") == ()
    off = {e.id for e in policy.rules if not e.enabled}
    assert off == {"bandwidth.not_comparable", "bandwidth.threshold"}


def test_examples_configmap_loads_for_validate_and_for_the_gate() -> None:
    config = load_cvf_config(CONFIGMAP)
    assert config.phase2_bw_threshold == 100 and config.phase4_bw_threshold == 380
    assert config.nic_firmware == "1.117.1-a-63" and config.ignored_keys == ()
    policy = load_policy(STRICT, read_cvf_config(CONFIGMAP), cvf_source=str(CONFIGMAP))
    assert policy.thresholds.nic_firmware == "1.117.1-a-63"
    assert policy.thresholds.mesh_avg_busbw_min_gbs == 110  # the policy file wins over the ConfigMap


# --------------------------------------------------------------------------- CI examples


@dataclass(frozen=True)
class Layout:
    passing: Path
    blocking: Path


def _capture_bundle(spec: NodeSpec, root: Path, out: Path) -> None:
    node = build_fake_node(root / f"{spec.name}-{out.parent.parent.name}", spec)
    bundle = capture(
        LocalRunner(env=node.env(os.environ)), node=spec.name, host_root=node.host_root, output_check=parser_check()
    )
    write_bundle(bundle, out)


def _lay_out(folder: Path, store: Path) -> None:
    for sub, src in (("plans", PLAN), ("policies", CI_POLICY), ("cvf", CONFIGMAP)):
        (folder / sub).mkdir(parents=True, exist_ok=True)
        shutil.copy(src, folder / sub / src.name)
    shutil.copytree(store, folder / "baselines", symlinks=True)


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    root = tmp_path_factory.mktemp("ci")
    names = node_names(2)
    before = gather(
        {n: node_spec(n, ROCM_6_1_3) for n in names},
        fleet_root=root / "fleet",
        out=root / "before",
        config=default_config(),
        output_check=parser_check(),
    )
    store = root / "store"
    with BaselineStore(store) as st:
        st.save([before[n].snapshot for n in names], tag="rocm-6.1.3")
    out = Layout(passing=root / "passing", blocking=root / "blocking")
    for folder in (out.passing, out.blocking):
        _lay_out(folder, store)
    after = {n: node_spec(n, ROCM_6_2_0) for n in names}
    for n in names:
        _capture_bundle(after[n], root / "fleet-after", out.passing / "bundles" / f"{n}.tar.gz")
    shutil.copytree(out.passing / "bundles", out.blocking / "bundles")
    first = NodeName(names[0])
    (out.blocking / "bundles" / f"{first}.tar.gz").unlink()
    _capture_bundle(
        faults.reverse_enumeration(after[first]), root / "fleet-after", out.blocking / "bundles" / f"{first}.tar.gz"
    )
    return out


def _github_script() -> str:
    doc = yaml.safe_load(GITHUB.read_text(encoding="utf-8"))
    steps = [s["run"] for job in doc["jobs"].values() for s in job["steps"] if "run" in s]
    invoking = [s for s in steps if INVOKES.search(s)]
    assert len(invoking) == 1, invoking
    return str(invoking[0])


def _gitlab_script() -> str:
    doc = yaml.safe_load(GITLAB.read_text(encoding="utf-8"))
    job = doc["rocm-bump-gate"]
    assert not any(INVOKES.search(line) for line in job["before_script"])  # installs only
    assert job["artifacts"]["reports"]["junit"] == "reports/upgrade-gate.xml"
    return "\n".join(job["script"])


def _bash(script: str, cwd: Path, extra_env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    bin_dir = Path(sys.executable).parent
    assert shutil.which("upgrade-gate", path=str(bin_dir)), f"the upgrade-gate console script is not in {bin_dir}"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", **extra_env}
    env.pop("NO_COLOR", None)
    # GitHub runs `run:` with `bash --noprofile --norc -eo pipefail`; GitLab's bash executor also stops at
    # the first failing command.
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _junit_failures(path: Path) -> int:
    return sum(1 for _ in ET.parse(path).getroot().iter("failure"))


@pytest.mark.parametrize("case", ["passing", "blocking"])
def test_examples_github_actions_gate_step_runs(layout: Layout, case: str, tmp_path: Path) -> None:
    folder: Path = getattr(layout, case)
    summary = tmp_path / "step-summary.md"
    summary.write_text("", encoding="utf-8")
    done = _bash(_github_script(), folder, {"GITHUB_STEP_SUMMARY": str(summary)})
    expected = 0 if case == "passing" else 1
    assert done.returncode == expected, done.stdout + done.stderr
    report = folder / "reports" / "upgrade-gate.xml"
    assert (_junit_failures(report) == 0) is (case == "passing")
    assert ("PASS" if case == "passing" else "BLOCK") in summary.read_text(encoding="utf-8")
    if case == "blocking":
        assert "device.order_changed" in done.stdout


def test_examples_gitlab_ci_script_runs(layout: Layout) -> None:
    # the same gate command as the GitHub step, whose PASS and BLOCK runs are above: run once, blocking
    folder = layout.blocking
    shutil.rmtree(folder / "reports", ignore_errors=True)
    done = _bash(_gitlab_script(), folder, {})
    assert done.returncode == 1, done.stdout + done.stderr
    assert _junit_failures(folder / "reports" / "upgrade-gate.xml") > 0
    assert "BLOCK" in (folder / "reports" / "upgrade-gate.md").read_text(encoding="utf-8")


def test_examples_workflows_are_what_the_readme_shows() -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    for line in _github_script().splitlines():
        if INVOKES.search(line):
            assert line.strip() in readme, f"README does not show the CI gate command: {line.strip()}"
