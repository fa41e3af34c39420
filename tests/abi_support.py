"""Builds the small real ELF libraries of the abi tests with the system C compiler (tests/fixtures/abi).

Trees (each a folder of shared objects, built once per session):
- `running`: libamdhip64.so.6 v1 (versions hip_5.0, hip_6.0) and an unversioned librocm_smi64.so.1.
- `same`: a byte-different rebuild of v1 (built with -O1): same ABI.
- `add`: v1 plus hipStreamBeginCaptureToGraph@hip_6.2 (compatible).
- `v2`: removes hipGraphInstantiateWithParams@hip_6.0, re-versions hipDeviceGetUuid (hip_5.0 ->
  hip_6.2), adds hipStreamBeginCaptureToGraph@hip_6.2, makes hipGetDeviceCount WEAK, turns
  hipRuntimeVersion from an OBJECT into a FUNC; librocm_smi64 v2 drops rsmi_dev_id_get.
- `bump`: v2 with the soname bumped to libamdhip64.so.7.
Consumer: `libtorch_hip.so`, linked against the `running` tree.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "abi"
DEBIAN_ROCM_LIBS = (
    Path("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5"),
    Path("/usr/lib/x86_64-linux-gnu/libhsa-runtime64.so.1"),
    Path("/usr/lib/librocm_smi64.so.1"),
)
"""Real ROCm libraries from Debian's libamdhip64-5, libhsa-runtime64-1 and librocm-smi64-1 (.ci/run)."""


@dataclass(frozen=True)
class AbiTrees:
    """Folders of built libraries, and the consumer linked against `running`."""

    running: Path
    same: Path
    add: Path
    v2: Path
    bump: Path
    consumer: Path


def _cc(*args: str | Path) -> None:
    subprocess.run(["gcc", "-shared", "-fPIC", *map(str, args)], check=True, capture_output=True)


def _hip(out: Path, soname: str, script: str, *defines: str, opt: str = "-O0") -> None:
    out.mkdir(parents=True, exist_ok=True)
    _cc(
        opt,
        f"-Wl,-soname,{soname}",
        f"-Wl,--version-script={FIXTURES / script}",
        *(f"-D{d}" for d in defines),
        FIXTURES / "fakehip.c",
        "-o",
        out / f"{soname}.0.0",
    )
    (out / soname).symlink_to(f"{soname}.0.0")


def _smi(out: Path, *defines: str) -> None:
    _cc(
        "-Wl,-soname,librocm_smi64.so.1",
        *(f"-D{d}" for d in defines),
        FIXTURES / "fakesmi.c",
        "-o",
        out / "librocm_smi64.so.1",
    )


def build_trees(base: Path) -> AbiTrees:
    """Compile every tree under `base`; skips (with the reason) only when there is no C compiler."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed (.ci/run installs it)")
    trees = AbiTrees(
        running=base / "running",
        same=base / "same",
        add=base / "add",
        v2=base / "v2",
        bump=base / "bump",
        consumer=base / "consumer" / "libtorch_hip.so",
    )
    _hip(trees.running, "libamdhip64.so.6", "hip-v1.map")
    _smi(trees.running)
    _hip(trees.same, "libamdhip64.so.6", "hip-v1.map", opt="-O1")
    _smi(trees.same)
    _hip(trees.add, "libamdhip64.so.6", "hip-v1-add.map", "ADD")
    _smi(trees.add)
    changes = ("REMOVE", "ADD", "REBIND", "RETYPE")
    _hip(trees.v2, "libamdhip64.so.6", "hip-v2.map", *changes)
    _smi(trees.v2, "REMOVE")
    _hip(trees.bump, "libamdhip64.so.7", "hip-v2.map", *changes)
    _smi(trees.bump)
    trees.consumer.parent.mkdir(parents=True)
    _cc(
        FIXTURES / "consumer.c",
        f"-L{trees.running}",
        "-l:libamdhip64.so.6",
        "-l:librocm_smi64.so.1",
        "-o",
        trees.consumer,
    )
    return trees


def debian_rocm_tree(base: Path) -> Path:
    """A folder of links to Debian's real ROCm libraries; skips when the packages are not installed."""
    missing = [str(p) for p in DEBIAN_ROCM_LIBS if not p.exists()]
    if missing:
        pytest.skip(f"Debian ROCm libraries not installed ({', '.join(missing)}; .ci/run installs them)")
    base.mkdir(parents=True, exist_ok=True)
    for path in DEBIAN_ROCM_LIBS:
        (base / path.name).symlink_to(path.resolve())
    return base
