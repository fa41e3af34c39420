"""Issue 28, item 10: the README's test command runs what CI runs, or says loudly what it skipped.

- The real control plane is built on first use when Go is here (tests.k8s.controlplane.ensure_built:
  tests/controlplane/build.sh, once, under a lock); `go` here is a stand-in that writes the binaries
  (the real build takes many minutes), so the test checks the wiring: build.sh is run with the cache
  folder, its log kept, and a second call finds the binaries.
- Without them (and with the build turned off), the pytest summary names how many real-control-plane
  tests were skipped and why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.k8s import controlplane

REPO = Path(__file__).resolve().parent.parent

FAKE_GO = """#!/bin/sh
# stand-in for `go build ... -o OUT PKG`: writes OUT as an executable and logs the call
out=""
while [ $# -gt 0 ]; do
  if [ "$1" = "-o" ]; then out="$2"; shift; fi
  shift
done
echo "fake go build -> $out" >> "$FAKE_GO_LOG"
printf '#!/bin/sh\\nexit 0\\n' > "$out"; chmod +x "$out"
"""


@pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd not installed: ensure_built returns that reason")
def test_real_k8s_control_plane_built_on_first_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "go").write_text(FAKE_GO, encoding="utf-8")
    (tools / "go").chmod(0o755)
    bin_dir = tmp_path / "cache" / "k8s" / "bin"
    monkeypatch.setenv("UPGRADE_GATE_K8S_BIN", str(bin_dir))
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GO_LOG", str(tmp_path / "go.log"))
    monkeypatch.delenv("UPGRADE_GATE_BUILD_K8S", raising=False)
    assert "real control plane not built" in (controlplane.missing_reason() or "")
    assert controlplane.ensure_built() is None
    assert sorted(p.name for p in bin_dir.iterdir()) == sorted(controlplane.COMPONENTS)
    assert (bin_dir.parent / "build.log").is_file()
    assert controlplane.ensure_built() is None  # built: no second build
    assert len((tmp_path / "go.log").read_text(encoding="utf-8").splitlines()) == 3


def test_real_k8s_skips_are_counted_in_the_summary(tmp_path: Path) -> None:
    env = {**os.environ, "UPGRADE_GATE_K8S_BIN": str(tmp_path / "none"), "UPGRADE_GATE_BUILD_K8S": "0"}
    env.pop("UPGRADE_GATE_REQUIRE_REAL_K8S", None)
    args = [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "-q",
            "tests/test_fleet_realcluster.py", "-k", "pod_security or busy_node"]  # fmt: skip
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "upgrade-gate: 2 real-control-plane test(s) SKIPPED: real control plane not built" in done.stdout, (
        done.stdout
    )
    assert "UPGRADE_GATE_BUILD_K8S=0" in done.stdout
