"""`abi` on real ELF built with gcc + version scripts: each change found and named, additions pass."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.abi_support import AbiTrees, build_trees
from upgrade_gate.abi.verdict import AbiResult, check_abi
from upgrade_gate.errors import InputError
from upgrade_gate.model import Finding, Severity, Verdict

NOW = "2026-12-01T12:00:00Z"


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> AbiTrees:
    return build_trees(tmp_path_factory.mktemp("abi"))


def _check(
    trees: AbiTrees, candidate: Path, *, consumers: bool = True, expected: Mapping[str, str] | None = None
) -> AbiResult:
    return check_abi(
        trees.running,
        candidate,
        [str(trees.consumer)] if consumers else [],
        expected=expected,
        cache_dir=None,
        workers=1,
        now=NOW,
    )


def _messages(result: AbiResult, severity: Severity | None = None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in result.report.findings:
        if severity is None or f.severity is severity:
            out.setdefault(f.rule, []).append(f.message)
    return out


def _blocking(result: AbiResult) -> list[Finding]:
    return [f for f in result.report.findings if f.severity is Severity.BLOCK]


def test_abi_unchanged_tree_passes_without_findings(trees: AbiTrees) -> None:
    result = _check(trees, trees.running)
    assert result.report.verdict is Verdict.PASS
    assert result.report.findings == ()
    assert [n.node for n in result.report.nodes] == ["libraries", str(trees.consumer)]


def test_abi_rebuild_with_same_interface_passes(trees: AbiTrees) -> None:
    result = _check(trees, trees.same)
    assert result.report.verdict is Verdict.PASS
    assert result.report.findings == ()


def test_abi_compatible_addition_passes_and_is_named(trees: AbiTrees) -> None:
    result = _check(trees, trees.add)
    assert result.report.verdict is Verdict.PASS
    assert _messages(result) == {
        "abi.symbols_added": [
            "libamdhip64.so.6 exports 1 new symbol(s) (compatible): hipStreamBeginCaptureToGraph@@hip_6.2"
        ]
    }


def test_abi_v2_names_every_library_change(trees: AbiTrees) -> None:
    result = _check(trees, trees.v2, consumers=False)
    assert result.report.verdict is Verdict.BLOCK
    assert _messages(result) == {
        "abi.symbol_removed": [
            "hipGraphInstantiateWithParams@@hip_6.0 is gone from libamdhip64.so.6 in the candidate",
            "rsmi_dev_id_get is gone from librocm_smi64.so.1 in the candidate",
        ],
        "abi.symbol_reversioned": [
            "hipDeviceGetUuid@@hip_5.0 is re-versioned in libamdhip64.so.6: now hipDeviceGetUuid@hip_6.2"
        ],
        "abi.symbol_binding_changed": [
            "hipGetDeviceCount@@hip_5.0 in libamdhip64.so.6 changed binding: GLOBAL -> WEAK"
        ],
        "abi.symbol_type_changed": ["hipRuntimeVersion@@hip_5.0 in libamdhip64.so.6 changed type: OBJECT -> FUNC"],
        "abi.symbols_added": [
            "libamdhip64.so.6 exports 1 new symbol(s) (compatible): hipStreamBeginCaptureToGraph@@hip_6.2"
        ],
    }


def test_abi_consumer_findings_name_consumer_library_and_symbol(trees: AbiTrees) -> None:
    result = _check(trees, trees.v2)
    consumer = next(n for n in result.report.nodes if n.node == str(trees.consumer))
    assert consumer.verdict is Verdict.BLOCK
    assert sorted((f.rule, f.severity.value, f.message) for f in consumer.findings) == [
        (
            "abi.consumer_symbol_missing",
            "block",
            "libtorch_hip.so needs hipDeviceGetUuid@hip_5.0, gone from libamdhip64.so.6 in the candidate",
        ),
        (
            "abi.consumer_symbol_missing",
            "block",
            "libtorch_hip.so needs hipGraphInstantiateWithParams@hip_6.0, gone from libamdhip64.so.6 in the candidate",
        ),
        (
            "abi.consumer_symbol_missing",
            "block",
            "libtorch_hip.so needs rsmi_dev_id_get, gone from librocm_smi64.so.1 in the candidate",
        ),
    ]
    first = next(f for f in consumer.findings if "hipGraph" in f.message)
    assert (first.device, first.path, first.expected) == (
        "libamdhip64.so.6",
        "libamdhip64.so.6:hipGraphInstantiateWithParams",
        "hipGraphInstantiateWithParams@hip_6.0",
    )


def test_abi_consumer_passes_a_compatible_candidate(trees: AbiTrees) -> None:
    result = _check(trees, trees.add)
    consumer = next(n for n in result.report.nodes if n.node == str(trees.consumer))
    assert consumer.verdict is Verdict.PASS and consumer.findings == ()


def test_abi_undeclared_soname_bump_blocks(trees: AbiTrees) -> None:
    result = _check(trees, trees.bump)
    blocking = _messages(result, Severity.BLOCK)
    assert blocking["abi.soname_changed"] == [
        "libamdhip64.so.6 became libamdhip64.so.7: binaries linked against it will not load"
    ]
    assert blocking["abi.symbol_removed"] == [
        "hipGraphInstantiateWithParams@@hip_6.0 is gone from libamdhip64.so.7 in the candidate"
    ]
    assert blocking["abi.consumer_needed_missing"] == [
        "libtorch_hip.so needs libamdhip64.so.6, not provided by the candidate (it provides libamdhip64.so.7: "
        "rebuild libtorch_hip.so against it)"
    ]


def test_abi_declared_soname_bump_is_accepted_for_the_library(trees: AbiTrees) -> None:
    result = _check(trees, trees.bump, consumers=False, expected={"libamdhip64.so.6": "libamdhip64.so.7"})
    assert result.report.verdict is Verdict.PASS
    info = _messages(result, Severity.INFO)
    assert info["abi.soname_changed"] == ["libamdhip64.so.6 became libamdhip64.so.7 (declared by the plan)"]
    assert "abi.symbol_removed" in info  # still named, no longer blocking


def test_abi_declared_bump_does_not_excuse_a_consumer_of_the_old_soname(trees: AbiTrees) -> None:
    result = _check(trees, trees.bump, expected={"libamdhip64.so.6": "libamdhip64.so.7"})
    assert result.report.verdict is Verdict.BLOCK
    assert [f.rule for f in _blocking(result)] == ["abi.consumer_needed_missing"]


def test_abi_declared_bump_that_did_not_happen_blocks(trees: AbiTrees) -> None:
    result = _check(trees, trees.add, consumers=False, expected={"libamdhip64.so.6": "libamdhip64.so.7"})
    assert _messages(result, Severity.BLOCK) == {
        "abi.soname_plan_unmet": [
            "the plan moves libamdhip64.so.6 to libamdhip64.so.7, but the candidate still provides libamdhip64.so.6"
        ]
    }


def test_abi_removed_library_blocks(trees: AbiTrees, tmp_path: Path) -> None:
    only_hip = tmp_path / "only-hip"
    only_hip.mkdir()
    for name in ("libamdhip64.so.6.0.0", "libamdhip64.so.6"):
        (only_hip / name).symlink_to(trees.running / name)
    result = _check(trees, only_hip)
    assert _messages(result, Severity.BLOCK) == {
        "abi.library_removed": ["librocm_smi64.so.1 is gone from the candidate (2 exported symbols)"],
        "abi.consumer_needed_missing": ["libtorch_hip.so needs librocm_smi64.so.1, not provided by the candidate"],
    }


def test_abi_bad_inputs_are_input_errors(trees: AbiTrees, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a directory"):
        check_abi(tmp_path / "nope", trees.running, now=NOW)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="no shared library"):
        check_abi(trees.running, empty, now=NOW)
    with pytest.raises(InputError, match="no ELF file found"):
        check_abi(trees.running, trees.running, [str(tmp_path / "none" / "*.so")], now=NOW)
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "libamdhip64.so.6").write_bytes(b"\x7fELF" + b"\x02\x01\x01" + b"\xff" * 60)
    with pytest.raises(InputError, match="corrupt ELF"):
        check_abi(trees.running, corrupt, now=NOW)
