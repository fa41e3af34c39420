"""`upgrade-gate abi` through the real entry point: each exit code, the plan's soname bumps, the cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.abi_support import AbiTrees, build_trees
from upgrade_gate import cachekey
from upgrade_gate.abi.tree import CACHE_FORMAT, library_files, scan, seal
from upgrade_gate.cli.main import run
from upgrade_gate.errors import ExitCode, InputError


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> AbiTrees:
    return build_trees(tmp_path_factory.mktemp("abi-cli"))


def _abi(trees: AbiTrees, candidate: Path, *extra: str) -> list[str]:
    return ["abi", "--running", str(trees.running), "--candidate", str(candidate), "--no-cache", *extra]


def test_abi_cli_block_exits_1_and_prints_the_causes(trees: AbiTrees, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(_abi(trees, trees.v2, "--consumer", str(trees.consumer.parent))) == ExitCode.BLOCK
    out = capsys.readouterr().out
    assert "BLOCK" in out
    assert (
        "libtorch_hip.so needs hipGraphInstantiateWithParams@hip_6.0, gone from libamdhip64.so.6 in the candidate"
        in out
    )


def test_abi_cli_compatible_candidate_exits_0(trees: AbiTrees) -> None:
    assert run(_abi(trees, trees.add, "--consumer", str(trees.consumer), "--workers", "2")) == ExitCode.PASS


def test_abi_cli_plan_declares_the_soname_bump(trees: AbiTrees, tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "id: rocm-bump\nchange:\n  rocm: {to: '7.0.0'}\n  sonames: [{from: libamdhip64.so.6, to: libamdhip64.so.7}]\n"
    )
    assert run(_abi(trees, trees.bump)) == ExitCode.BLOCK
    assert run(_abi(trees, trees.bump, "--plan", str(plan))) == ExitCode.PASS
    assert run(_abi(trees, trees.bump, "--plan", str(plan), "--consumer", str(trees.consumer))) == ExitCode.BLOCK


def test_abi_cli_bad_input_exits_3(trees: AbiTrees, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(_abi(trees, tmp_path / "missing")) == ExitCode.BAD_INPUT
    assert "not a directory" in capsys.readouterr().err
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "libamdhip64.so.6").write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + b"\xff" * 200)
    assert run(_abi(trees, corrupt)) == ExitCode.BAD_INPUT
    assert "corrupt ELF" in capsys.readouterr().err
    bad_plan = tmp_path / "bad.yaml"
    bad_plan.write_text("id: x\nchange:\n  sonames: [{from: libamdhip64.so.6}]\n")
    assert run(_abi(trees, trees.add, "--plan", str(bad_plan))) == ExitCode.BAD_INPUT
    assert run(_abi(trees, trees.add, "--consumer", str(tmp_path / "nothing-*.so"))) == ExitCode.BAD_INPUT


def test_abi_cli_usage_errors_exit_2(trees: AbiTrees) -> None:
    assert run(["abi", "--running", str(trees.running)]) == ExitCode.USAGE
    assert run(_abi(trees, trees.add, "--report", "pdf:/tmp/x.pdf")) == ExitCode.USAGE
    assert run(_abi(trees, trees.add, "--causes", "--summary")) == ExitCode.USAGE


def test_cache_serves_unchanged_files_and_rereads_changed_ones(
    trees: AbiTrees, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))  # this test's own key
    cachekey.forget()
    key = cachekey.user_key()
    assert key is not None
    cache = tmp_path / "cache"
    files, _aliases, _not_elf = library_files(trees.running)
    first, hits = scan(files, cache_dir=cache, workers=1)
    assert hits == 0 and len(list(cache.rglob("*.abi"))) == len(files)
    again, hits = scan(files, cache_dir=cache, workers=1)
    assert hits == len(files) and again == first
    entry = next(cache.rglob("*.abi"))
    damaged = json.dumps({"format": CACHE_FORMAT, "sha256": entry.stem, "exports": "damaged"}).encode()
    for data in (damaged, seal(key, entry.stem, damaged), seal(key, entry.stem, b"{not json")):
        entry.write_bytes(data)  # unsealed, or sealed but not the entry's shape
        healed, hits = scan(files, cache_dir=cache, workers=1)  # a damaged entry is never trusted: read again
        assert healed == first and hits == len(files) - 1
    changed = tmp_path / "libchanged.so.1"
    changed.write_bytes(files[0].read_bytes() + b"\0")
    result, hits = scan([changed], cache_dir=cache, workers=1)
    assert hits == 0 and result[changed].sha256 != first[files[0]].sha256


def test_scan_in_a_process_pool_reads_the_same_and_reports_corrupt_files(trees: AbiTrees, tmp_path: Path) -> None:
    files = [f for tree in (trees.running, trees.v2, trees.add, trees.bump) for f in library_files(tree)[0]]
    assert len(files) >= 4  # enough for the pool
    serial, _ = scan(files, cache_dir=None, workers=1)
    pooled, _ = scan(files, cache_dir=tmp_path / "cache", workers=2)
    assert pooled == serial
    corrupt = tmp_path / "libbroken.so.1"
    corrupt.write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + b"\xff" * 200)
    with pytest.raises(InputError, match=r"libbroken\.so\.1: corrupt ELF"):
        scan([*files, corrupt], cache_dir=None, workers=2)


def test_library_without_soname_is_keyed_by_its_link_name(tmp_path: Path) -> None:
    from upgrade_gate.abi.tree import read_library_tree

    for build in ("60103", "60200"):
        tree = tmp_path / build
        tree.mkdir()
        header = b"\x7fELF\x02\x01\x01" + bytes(9) + bytes.fromhex("0300 3e00 01000000") + bytes(40)
        (tree / f"librccl.so.1.0.{build}").write_bytes(header)
        (tree / "librccl.so.1").symlink_to(f"librccl.so.1.0.{build}")
        assert list(read_library_tree(tree, cache_dir=None).libraries) == ["librccl.so.1"]
