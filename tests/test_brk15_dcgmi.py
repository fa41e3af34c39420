"""brk15 findings 07-11: `dcgmi diag -r 2` tables that passed phase 1 on NVIDIA nodes without being evidence.

Every table here is a mutation of a real output: the corpus p4de run (DCGM 3.3.3, 8x A100, corpus #68,
tests/fixtures/dcgmi/) as the fake 8x H100 node renders it (`render_dcgmi_diag`: only its driver and device
id cells changed), with the rows named at each test removed or changed, as the tester's filters did
(/tmp/brk15/findings/NN-*/filter.py). The phase runs through the real pipeline and launcher on the fake
node, against the node's captured snapshot (8 GPUs, driver 550.127.05).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from upgrade_gate.cli.collect_cmds import parser_check
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.probes import probe_catalogue
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.errors import ParseError
from upgrade_gate.fakenode.nvidia import build_nvidia_node, h100_node
from upgrade_gate.fakenode.nvidia_render import render_dcgmi_diag, write_stub_tool
from upgrade_gate.model import NodeName, PhaseResult, PhaseStatus, Snapshot
from upgrade_gate.parse.dcgmi import parse_dcgmi_diag
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.validate.config import default_config
from upgrade_gate.validate.launcher import LocalLauncher
from upgrade_gate.validate.phases.dcgm import DcgmAcceptancePhase
from upgrade_gate.validate.pipeline import run_pipeline
from upgrade_gate.vendors import NVIDIA

NODE = NodeName("gpu-node-01")
WHERE = "dcgmi diag -r 2: "
P4DE = FIXTURES / "dcgmi" / "a100x8-p4de-diag-r2-nvlinks-expected-up-dcgm3.3.3.txt"
PASS_ALL = "| Pass - All                                     |"


def _cell(left: str, right: str) -> str:
    """A row of the 78-column table (26 + 47 characters of cell text)."""
    return "| " + left.ljust(26) + "| " + right.ljust(47) + "|"


class Node:
    """One fake H100 node and its captured snapshot; `phase1(text)` runs phase 1 with dcgmi printing `text`."""

    def __init__(self, root: Path) -> None:
        self.spec = h100_node(NODE, seed=1)
        self.node = build_nvidia_node(root / "node", self.spec)
        self.env = self.node.env(os.environ)
        bundle = capture(
            LocalRunner(env=self.env),
            node=NODE,
            host_root=self.node.host_root,
            output_check=parser_check(),
            probes=probe_catalogue(self.node.host_root, vendor=NVIDIA),
        )
        self.snapshot: Snapshot = build_snapshot(bundle)
        self.table = render_dcgmi_diag(self.spec)

    def phase1(self, mutate: Callable[[list[str]], list[str]]) -> PhaseResult:
        text = "\n".join(mutate(self.table.splitlines())) + "\n"
        write_stub_tool(self.node, "dcgmi", {tuple(NVIDIA.phase_commands[1][1:]): text})
        return run_pipeline(
            [NODE],
            phases=(DcgmAcceptancePhase(),),
            config=default_config(),
            launcher=LocalLauncher({NODE: self.env}),
            snapshots={NODE: self.snapshot},
        )[NODE][0]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Node:
    return Node(tmp_path_factory.mktemp("brk15-dcgmi"))


def _section_of(lines: list[str]) -> list[str]:
    sections, name = [], ""
    for line in lines:
        found = re.match(r"^[|+]-{5}  (\w+)", line)
        name = found.group(1) if found else name
        sections.append(name)
    return sections


def test_brk15_dcgmi_control_the_rendered_corpus_table_passes(node: Node) -> None:
    result = node.phase1(lambda lines: lines)
    assert result.status is PhaseStatus.PASSED, result.reasons
    assert node.snapshot.software.driver_version == node.spec.driver.version and len(node.snapshot.gpus) == 8


def test_brk15_dcgmi_a_table_without_any_test_row_is_an_error(node: Node) -> None:
    # 07: the Metadata kept, every row of Deployment/Integration/Hardware/Stress removed.
    def no_tests(lines: list[str]) -> list[str]:
        tested = ("Deployment", "Integration", "Hardware", "Stress")
        return [
            line
            for line, sec in zip(lines, _section_of(lines), strict=True)
            if not (sec in tested and line[:2] == "| ")
        ]

    result = node.phase1(no_tests)
    assert result.status is PhaseStatus.ERROR
    assert result.reasons == (WHERE + "no test result in the table: the diagnostic ran nothing",)


def test_brk15_dcgmi_every_test_skipped_is_an_error_naming_each(node: Node) -> None:
    # 08: every `Pass` / `Pass - All` cell turned into `Skip` / `Skip - All`.
    def all_skip(lines: list[str]) -> list[str]:
        return [
            re.sub(r"\| Pass( - All)?(\s*)\|$", lambda m: "| Skip" + (m.group(1) or "") + m.group(2) + "|", line)
            for line in lines
        ]

    result = node.phase1(all_skip)
    assert result.status is PhaseStatus.ERROR
    skipped = [r for r in result.reasons if "skipped on all GPUs" in r]
    assert len(skipped) == 11 and skipped[-1] == (
        WHERE + "GPU Memory skipped on all GPUs: a test the run level includes that did not run is no pass"
    )


def test_brk15_dcgmi_gpu_memory_skipped_is_an_error(node: Node) -> None:
    # 08 variant: only `GPU Memory | Skip - All`.
    def mem_skip(lines: list[str]) -> list[str]:
        return [
            line.replace(PASS_ALL, "| Skip - All                                     |")
            if line.startswith("| GPU Memory")
            else line
            for line in lines
        ]

    result = node.phase1(mem_skip)
    assert result.status is PhaseStatus.ERROR
    assert result.reasons == (
        WHERE + "GPU Memory skipped on all GPUs: a test the run level includes that did not run is no pass",
    )


def test_brk15_dcgmi_gpus_without_a_result_are_an_error_naming_them(node: Node) -> None:
    # 09: `Pass - All` of PCIe and GPU Memory narrowed to `Pass - GPU: 0, 1, 2` on the 8-GPU node.
    def partial(lines: list[str]) -> list[str]:
        return [line.replace(PASS_ALL, "| Pass - GPU: 0, 1, 2                            |") for line in lines]

    result = node.phase1(partial)
    assert result.status is PhaseStatus.ERROR
    assert result.reasons == tuple(
        WHERE + f"{test} has no result for GPU 3, 4, 5, 6, 7 of the snapshot's 8 GPUs"
        for test in ("PCIe", "GPU Memory")
    )


def test_brk15_dcgmi_a_result_for_a_gpu_the_snapshot_lacks_is_an_error(node: Node) -> None:
    # 09, the other side: PCIe's `Pass - All` spelled per GPU with a ninth GPU the 8-GPU snapshot lacks.
    def nine(lines: list[str]) -> list[str]:
        row = _cell("PCIe", "Pass - GPU: 0, 1, 2, 3, 4, 5, 6, 7, 8")
        return [row if line.startswith("| PCIe") else line for line in lines]

    result = node.phase1(nine)
    assert result.status is PhaseStatus.ERROR
    assert result.reasons == (WHERE + "PCIe has a result for GPU 8, which the snapshot's 8 GPUs lack",)


def test_brk15_dcgmi_fewer_device_ids_than_gpus_is_an_error(node: Node) -> None:
    # 09 variant: `GPU Device IDs Detected` lists 7 ids for the snapshot's 8 GPUs.
    ids = ",".join(["2330"] * 8)

    def ids7(lines: list[str]) -> list[str]:
        return [line.replace(ids, ",".join(["2330"] * 7) + "     ") for line in lines]

    result = node.phase1(ids7)
    assert result.status is PhaseStatus.ERROR
    assert result.reasons == (
        WHERE
        + "detected 7 GPU device id(s) for the snapshot's 8 GPUs: the diagnostic did not see every GPU of the node",
    )


def test_brk15_dcgmi_per_gpu_results_covering_every_gpu_fail_only_for_the_failure(node: Node) -> None:
    # The per-GPU form of NVIDIA/go-dcgm #52 (DCGM 3.3.1: `Pass - GPU: 1` / `Fail - GPU: 0`) on 8 GPUs: every
    # GPU has a result, so the only reason is the failure (no coverage error on a complete table).
    def per_gpu(lines: list[str]) -> list[str]:
        out = []
        for line in lines:
            if line.startswith("| GPU Memory"):
                out += [_cell("GPU Memory", "Pass - GPU: 1, 2, 3, 4, 5, 6, 7"), _cell("", "Fail - GPU: 0")]
            else:
                out.append(line)
        return out

    result = node.phase1(per_gpu)
    assert result.status is PhaseStatus.FAILED
    assert result.reasons == (WHERE + "GPU Memory failed on GPU 0",)


def test_brk15_dcgmi_a_warn_fails_the_phase_naming_the_warning(node: Node) -> None:
    # 10: `GPU Memory | Warn - All` with the Warning row of an ECC double-bit error count.
    def mem_warn(lines: list[str]) -> list[str]:
        out = []
        for line in lines:
            if line.startswith("| GPU Memory"):
                out += [
                    line.replace("Pass - All ", "Warn - All "),
                    _cell("Warning", "GPU 3 ECC DBE count 12 exceeds threshold 0"),
                ]
            else:
                out.append(line)
        return out

    result = node.phase1(mem_warn)
    assert result.status is PhaseStatus.FAILED
    assert result.reasons == (WHERE + "GPU Memory warned on all GPUs: GPU 3 ECC DBE count 12 exceeds threshold 0",)
    assert result.annotations["amd.com/gpu-hw-acceptance-dcgm-warnings"] == "GPU Memory"


def test_brk15_dcgmi_a_table_without_metadata_is_an_error(node: Node) -> None:
    # 11: the Metadata section (its header and three rows) removed.
    def no_meta(lines: list[str]) -> list[str]:
        meta = r"^\| (DCGM Version|Driver Version Detected|GPU Device IDs)"
        return [line for line in lines if not re.match(meta, line) and "Metadata" not in line]

    result = node.phase1(no_meta)
    assert result.status is PhaseStatus.ERROR
    assert result.reasons == (
        WHERE + "no Metadata section (DCGM Version, Driver Version Detected, GPU Device IDs Detected): "
        "the driver the diagnostic ran against and the GPUs it saw cannot be checked",
    )


def test_brk15_dcgmi_refuses_a_metadata_row_printed_twice() -> None:
    # The corpus p4de table with a second `Driver Version Detected` row: which driver did the run see?
    text = P4DE.read_text(encoding="utf-8")
    row = _cell("Driver Version Detected", "535.104.12")
    with pytest.raises(ParseError, match="'Driver Version Detected' printed twice"):
        parse_dcgmi_diag(text.replace(row, row + "\n" + _cell("Driver Version Detected", "570.158.01"), 1))


def test_brk15_dcgmi_refuses_a_device_id_list_with_an_empty_piece() -> None:
    # The corpus p4de table with one of its eight ids blanked: seven ids and a hole, never eight GPUs.
    text = P4DE.read_text(encoding="utf-8")
    ids = ",".join(["20b2"] * 8)
    with pytest.raises(ParseError, match="GPU device id '' is not a PCI device id"):
        parse_dcgmi_diag(text.replace(ids, ",".join(["20b2"] * 7) + ",    ", 1))
