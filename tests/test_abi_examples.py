"""The CI examples' `abi` steps run as written on real .deb packages of gcc-built libraries."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from tests.abi_support import AbiTrees, build_trees

EXAMPLES = Path(__file__).parent.parent / "examples"
GITHUB = EXAMPLES / "github-actions" / "rocm-bump-gate.yml"
GITLAB = EXAMPLES / "gitlab-ci" / "rocm-bump-gate.yml"
PLAN = EXAMPLES / "plans" / "rocm-6.1.3-to-6.2.0.yaml"


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> AbiTrees:
    return build_trees(tmp_path_factory.mktemp("abi-ci"))


def _deb(tree: Path, prefix: str, version: str, out: Path) -> None:
    """A real Debian package holding `tree` as /opt/<prefix>/lib (built with dpkg-deb)."""
    if shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb is not installed")
    root = out.parent / f"{out.stem}-root"
    shutil.copytree(tree, root / "opt" / prefix / "lib", symlinks=True)
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN" / "control").write_text(
        f"Package: hip-runtime-amd\nVersion: {version}\nArchitecture: amd64\n"
        "Maintainer: test <test@example.com>\nDescription: fake HIP runtime for the abi CI test\n"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(root), str(out)], check=True, capture_output=True)
    shutil.rmtree(root)


def _folder(base: Path, trees: AbiTrees, candidate: Path) -> Path:
    _deb(trees.running, "rocm-6.1.3", "6.1.3", base / "packages" / "running" / "hip-runtime-amd_6.1.3_amd64.deb")
    _deb(candidate, "rocm-6.2.0", "6.2.0", base / "packages" / "candidate" / "hip-runtime-amd_6.2.0_amd64.deb")
    (base / "consumers" / "torch" / "lib").mkdir(parents=True)
    shutil.copy(trees.consumer, base / "consumers" / "torch" / "lib" / trees.consumer.name)
    (base / "plans").mkdir()
    shutil.copy(PLAN, base / "plans" / PLAN.name)
    return base


def _github_abi_script() -> str:
    doc = yaml.safe_load(GITHUB.read_text(encoding="utf-8"))
    steps = [s["run"] for s in doc["jobs"]["abi"]["steps"] if "run" in s and "upgrade-gate abi" in s["run"]]
    assert len(steps) == 1
    return str(steps[0])


def _gitlab_abi_script() -> str:
    job = yaml.safe_load(GITLAB.read_text(encoding="utf-8"))["rocm-bump-abi"]
    assert job["artifacts"]["reports"]["junit"] == "reports/upgrade-gate-abi.xml"
    return "\n".join(job["script"])


def _bash(script: str, cwd: Path, env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    bin_dir = Path(sys.executable).parent
    assert shutil.which("upgrade-gate", path=str(bin_dir)), f"the upgrade-gate console script is not in {bin_dir}"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", **env_extra}
    env["XDG_CACHE_HOME"] = str(cwd / ".cache")
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(("case", "expected"), [("add", 0), ("v2", 1)])
def test_github_abi_step_runs_on_unpacked_packages(trees: AbiTrees, tmp_path: Path, case: str, expected: int) -> None:
    folder = _folder(tmp_path / "repo", trees, getattr(trees, case))
    summary = tmp_path / "summary.md"
    done = _bash(_github_abi_script(), folder, {"GITHUB_STEP_SUMMARY": str(summary)})
    assert done.returncode == expected, done.stdout + done.stderr
    failures = sum(1 for _ in ET.parse(folder / "reports" / "upgrade-gate-abi.xml").getroot().iter("failure"))
    assert (failures == 0) is (expected == 0)
    if expected:
        assert "libtorch_hip.so needs hipGraphInstantiateWithParams@hip_6.0, gone from libamdhip64.so.6" in done.stdout
        assert "BLOCK" in summary.read_text(encoding="utf-8")


def test_gitlab_abi_job_runs_and_blocks(trees: AbiTrees, tmp_path: Path) -> None:
    folder = _folder(tmp_path / "repo", trees, trees.v2)
    done = _bash(_gitlab_abi_script(), folder, {})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "BLOCK" in (folder / "reports" / "upgrade-gate-abi.md").read_text(encoding="utf-8")
