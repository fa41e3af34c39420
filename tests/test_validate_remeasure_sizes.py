"""Re-measure only what is in doubt (issue 14): phases 2 and 5 re-run the sizes of a sweep that are
inconclusive against the node's baseline ALONE (rccl-tests `-b FIRST -e LAST` per range), so the sizes already
decided keep their samples; a curve, the average or a floor in doubt re-run the whole sweep.

`plan_sweep` is the rule both the phases and bench/detect_nodes.py call. The phase tests run the real fake
rccl-tests (it renders the sweep it is asked for, a one-size table included) and the real baseline
comparison (`judge.remeasure.BaselineComparison`), with a baseline built from a clear run: the curve 6%
lower than the candidate and one size 4.5% higher, which leaves that one size inconclusive (a drop under
min_effect that departs from the rest of its curve by ~10%): neither blocked nor settled.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from tests.conftest import FIXTURES
from tests.test_validate_support import fast_config, healthy_spec, launcher_for, make_node, nic_snapshot
from upgrade_gate.fakenode import FakeNode
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.judge.remeasure import BaselineComparison
from upgrade_gate.model import NodeInfo, NodeName, PhaseResult, PhaseStatus, Snapshot, Software, replace
from upgrade_gate.parse.rccl_tests import parse_rccl_tests
from upgrade_gate.validate import cvf
from upgrade_gate.validate.config import CvfConfig
from upgrade_gate.validate.phase import Outcome
from upgrade_gate.validate.phases import ClusterPhase, MeshPhase
from upgrade_gate.validate.phases.sweeps import SweepRun, check_requested, requested_sweep
from upgrade_gate.validate.pipeline import run_pipeline
from upgrade_gate.validate.remeasure import MAX_RANGES, Resampling, plan_sweep, size_of, sweep_sizes

NAMES = ("node-01", "node-02")
NODE = NodeName("node-01")
GIB = 1 << 30
SIZES = sweep_sizes(1024, 2 * GIB, 2)  # CVF's 1K..2G, factor 2
P = Resampling(max_samples=20)


def test_sweep_sizes_follow_the_tool_loop() -> None:
    assert SIZES[0] == 1024 and SIZES[-1] == 2 * GIB and len(SIZES) == 22
    assert sweep_sizes(1 << 20, 1 << 20, 2) == (1 << 20,)
    assert sweep_sizes(0, 8, 2) == () and sweep_sizes(8, 64, 1) == ()


def test_size_of_reads_both_halves_and_nothing_else() -> None:
    assert size_of("mesh/all_reduce/busbw/1024") == 1024
    assert size_of("cluster/all_gather/busbw_inplace/2147483648") == 2 * GIB
    assert size_of("mesh/all_reduce/busbw") is None and size_of("mesh/all_reduce/avg_busbw") is None


def _plan(
    keys: tuple[str, ...], *, whole: bool = False, counts: Mapping[int, int] | None = None, full: int = 5
) -> list[tuple[tuple[int, int] | None, int, tuple[int, ...]]]:
    have = {s: 5 for s in SIZES} | dict(counts or {})
    plans = plan_sweep(keys, whole=whole, sizes=SIZES, counts=have, full=full, samples=5, p=P)
    return [(x.span, x.runs, x.sizes) for x in plans]


def test_plan_sizes_in_doubt_alone_as_ranges_of_consecutive_sizes() -> None:
    assert _plan(("mesh/all_reduce/busbw_inplace/1073741824",)) == [((GIB, GIB), 5, (GIB,))]
    both = _plan(("mesh/all_reduce/busbw/536870912", "mesh/all_reduce/busbw_inplace/1073741824"))
    assert both == [((GIB // 2, GIB), 5, (GIB // 2, GIB))]  # consecutive sizes: one range, one run per sample
    apart = _plan(("mesh/all_reduce/busbw/1024", "mesh/all_reduce/busbw/1073741824"))
    assert apart == [((1024, 1024), 5, (1024,)), ((GIB, GIB), 5, (GIB,))]  # the sizes between keep their samples


def test_plan_merges_the_closest_ranges_beyond_max_ranges() -> None:
    keys = tuple(f"mesh/all_reduce/busbw/{SIZES[i]}" for i in (0, 2, 10, 20))  # gaps 1, 7 and 9 sizes
    assert MAX_RANGES == 3
    assert [span for span, _, _ in _plan(keys)] == [
        (SIZES[0], SIZES[2]),
        (SIZES[10], SIZES[10]),
        (SIZES[20], SIZES[20]),
    ]


@pytest.mark.parametrize(
    "keys,whole",
    [
        (("mesh/all_reduce/busbw",), False),  # a curve in doubt
        (("mesh/all_reduce/avg_busbw", "mesh/all_reduce/busbw/1024"), False),  # the average
        (("mesh/all_reduce/busbw/1000",), False),  # a size the sweep does not have
        ((), True),  # the floor on the average
    ],
)
def test_plan_whole_sweep_for_what_only_the_whole_sweep_measures(keys: tuple[str, ...], whole: bool) -> None:
    assert _plan(keys, whole=whole) == [(None, 5, SIZES)]


def test_plan_never_passes_the_limit() -> None:
    near = _plan(("mesh/all_reduce/busbw/1024", "mesh/all_reduce/busbw/2048"), counts={1024: 18, 2048: 10})
    assert near == [((1024, 2048), 2, (1024, 2048))]  # 18 -> 20, not 23
    assert _plan(("mesh/all_reduce/busbw/1024",), counts={1024: 20}) == []
    # the whole sweep at its limit: the sizes in doubt still below it are re-run alone
    at_limit = {s: 20 for s in SIZES}
    rest = _plan(("mesh/all_reduce/busbw", "mesh/all_reduce/busbw/2048"), full=20, counts=at_limit | {2048: 15})
    assert rest == [((2048, 2048), 5, (2048,))]
    assert _plan(("mesh/all_reduce/busbw",), full=20, counts=at_limit) == []


def test_a_run_of_some_sizes_must_print_the_range_it_was_asked() -> None:
    capture = FIXTURES / "rccl-tests" / "mi350x-8gpu-mpi-allreduce-rocm7.0-degraded-large-msgs.txt"
    whole = parse_rccl_tests(capture.read_text(encoding="utf-8"))  # -b 8 -e 8G -f 2 -n 20 -w 5
    config = fast_config(PHASE2_START_MSG_SIZE="8", PHASE2_END_MSG_SIZE="8G", PHASE2_ITER_COUNT="20",
                         PHASE2_WARMUP_ITER_COUNT="5")  # fmt: skip
    out = Outcome()
    check_requested([SweepRun(whole), SweepRun(whole, (GIB, GIB))], out, tool="all_reduce_perf",
                    asked=requested_sweep(config))  # fmt: skip
    assert out.errors == [
        "all_reduce_perf: run 2 swept another sweep than asked: minBytes 8 (asked 1073741824), maxBytes "
        "8589934592 (asked 1073741824); its numbers are not evidence"
    ]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> dict[str, FakeNode]:
    root = tmp_path_factory.mktemp("remeasure-sizes")
    return {name: make_node(root, healthy_spec(name)) for name in NAMES}


def _config() -> CvfConfig:
    return fast_config(PHASE4_IB_DEV_PREFIX="ionic_", UPGRADE_GATE_SAMPLES="3")


def _baseline(clear: PhaseResult, op: str, size: int) -> dict[str, Snapshot]:
    """The clear run as the node's baseline: `op`'s curve 6% lower, its out-of-place `size` 4.5% higher."""

    def factor(key: str) -> float:
        if f"/{op}/busbw" not in key:
            return 1.0
        return 1.045 if key.endswith(f"/{op}/busbw/{size}") else 0.94

    scaled = tuple(
        replace(m, samples=tuple(round(s * factor(m.key), 2) for s in m.samples), settings=dict(m.settings))
        for m in clear.measurements
    )
    info = NodeInfo(name=NODE, node_class="mi300x-8gpu")
    phase = replace(clear, measurements=scaled)
    return {NODE: Snapshot(node=info, taken_at="2026-12-01T00:00:00Z", tool_version="test", software=Software(),
                           phases=(phase,))}  # fmt: skip


def _counts(result: PhaseResult, prefix: str) -> dict[str, int]:
    return {m.key: len(m.samples) for m in result.measurements if m.key.startswith(prefix)}


def _run(phase: MeshPhase | ClusterPhase, pair: dict[str, FakeNode], resample: Resampling) -> PhaseResult:
    nodes = [NODE] if isinstance(phase, MeshPhase) else list(NAMES)
    results = run_pipeline(nodes, phases=[phase], config=_config(), launcher=launcher_for(*pair.values()),
                           snapshots={n: nic_snapshot(gpus=8) for n in nodes}, resampling=resample)  # fmt: skip
    return results[NODE][0]


@pytest.mark.parametrize(
    "phase,prefix,label",
    [
        (MeshPhase(), "mesh/all_reduce/", cvf.GPU_MESH_VALIDATION),
        (ClusterPhase(), "cluster/all_reduce/", cvf.CLUSTER_VALIDATION_STATUS),
    ],
)
def test_phase_re_measures_a_size_in_doubt_alone(
    phase: MeshPhase | ClusterPhase, prefix: str, label: str, pair: dict[str, FakeNode]
) -> None:
    clear = _run(phase, pair, Resampling(max_samples=7))
    assert clear.status is PhaseStatus.PASSED, clear.reasons
    assert set(_counts(clear, prefix).values()) == {3}
    compare = BaselineComparison(_baseline(clear, "all_reduce", GIB), load_policy())
    measured = [m for m in clear.measurements if m.key.startswith(prefix)]
    assert set(compare(NODE, measured)) == {f"{prefix}busbw/{GIB}"}  # the one size, not its curve

    result = _run(phase, pair, Resampling(max_samples=7, compare=compare))
    assert result.status is PhaseStatus.PASSED, result.reasons  # the one-size runs parsed and matched -b/-e
    counts = _counts(result, prefix)
    alone = {f"{prefix}busbw/{GIB}", f"{prefix}busbw_inplace/{GIB}"}  # one run measures both halves
    assert {k: n for k, n in counts.items() if n != 3} == dict.fromkeys(alone, 7)  # 3 + 3 + 1: the limit
    assert counts[f"{prefix}avg_busbw"] == 3  # a one-size run's average is not the sweep's
    assert len({tuple(sorted(m.settings.items())) for m in result.measurements if m.key.startswith(prefix)}) == 1
    note = result.annotations[f"{label}-samples"]
    tool = "all_reduce_perf" if isinstance(phase, MeshPhase) else "mpirun all_reduce_perf"
    assert note.startswith(f"{tool} {GIB} B: 7 (re-measured: 1 comparison(s) with node-01's baseline "
                           f"inconclusive ({prefix}busbw/{GIB}) after 3 run(s))")  # fmt: skip
    assert f"{tool}: " not in note  # the whole sweep ran 3 times, as asked: not re-measured
