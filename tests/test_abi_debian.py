"""The ELF reader and `abi` on Debian's real ROCm libraries (libamdhip64-5, libhsa-runtime64-1, librocm-smi64-1)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.abi_support import DEBIAN_ROCM_LIBS, debian_rocm_tree
from upgrade_gate.abi.elf import read_elf
from upgrade_gate.cli.main import run
from upgrade_gate.errors import ExitCode

HIP = DEBIAN_ROCM_LIBS[0]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return debian_rocm_tree(tmp_path_factory.mktemp("debian") / "lib")


def test_reader_reads_debian_libamdhip64(tree: Path) -> None:
    abi = read_elf(HIP, "0" * 64)
    assert (abi.kind, abi.machine, abi.soname) == ("ET_DYN", "EM_X86_64", "libamdhip64.so.5")
    assert "libhsa-runtime64.so.1" in abi.needed
    assert abi.version_defs[:3] == ("hip_4.2", "hip_4.3", "hip_4.4")
    labels = {e.label() for e in abi.exports}
    assert "hipMalloc@@hip_4.2" in labels and "hipInit@@hip_4.2" in labels
    assert not {"hip_4.2", "hip_5.2"} & {e.name for e in abi.exports}  # version-node markers are not API
    hsa = [i for i in abi.imports if i.library == "libhsa-runtime64.so.1"]
    assert hsa and all(i.version == "ROCR_1" for i in hsa)
    assert any(i.label() == "hsa_signal_create@ROCR_1" for i in hsa)


def test_reader_reads_unversioned_debian_rocm_smi() -> None:
    path = DEBIAN_ROCM_LIBS[2]
    if not path.exists():
        pytest.skip("librocm-smi64-1 is not installed (.ci/run installs it)")
    abi = read_elf(path, "0" * 64)
    assert abi.soname == "librocm_smi64.so.1" and abi.version_defs == ()
    assert any(e.name == "rsmi_init" and e.version is None for e in abi.exports)


def test_abi_cli_debian_tree_against_itself_passes_in_every_format(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "reports"
    argv = ["abi", "--running", str(tree), "--candidate", str(tree), "--consumer", str(HIP.resolve())]
    argv += ["--cache-dir", str(tmp_path / "cache"), "--now", "2026-12-01T12:00:00Z"]
    for fmt, name in (("json", "r.json"), ("junit", "r.xml"), ("markdown", "r.md"), ("html", "r.html")):
        argv += ["--report", f"{fmt}:{out / name}"]
    assert run(argv) == ExitCode.PASS
    report = json.loads((out / "r.json").read_text())
    assert report["verdict"] == "PASS"
    assert [n["node"] for n in report["nodes"]] == ["libraries", str(HIP.resolve())]
    suites = ElementTree.parse(out / "r.xml").getroot()
    assert suites.get("failures") == "0" and int(suites.get("tests") or 0) > 0
    assert "PASS" in (out / "r.md").read_text() and "<html" in (out / "r.html").read_text().lower()
    assert run(argv) == ExitCode.PASS  # second run from the cache


def test_abi_list_prints_the_listing_of_debian_libraries(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["abi-list", "--no-cache", str(tree)]) == ExitCode.PASS
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "upgrade-gate-abi-list/1"
    by_soname = {lib["soname"]: lib for lib in doc["libraries"]}
    assert set(by_soname) == {p.name for p in DEBIAN_ROCM_LIBS}
    hip = by_soname["libamdhip64.so.5"]
    assert hip["path"] == str(HIP.resolve())
    assert hip["file_sha256"] == hashlib.sha256(HIP.read_bytes()).hexdigest()
    assert hip["symbol_count"] > 300
