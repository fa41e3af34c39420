"""A candidate's claims about itself are input, never trust (2026-12-07 break test: 44 edited candidates of the
demo's healthy canary passed).

Each case edits one claim of an otherwise healthy candidate, as a hand-edited, damaged or forged snapshot would:
which probes are required or stand in for which, a passed workload phase without the measurements its pass
rests on, a latency the baseline measured and the candidate lost, a pre-release or an error text glued to
the planned ROCm version, another node class, a NIC listed twice, a passed phase whose own labels say it
failed. Every one must block; the unedited candidate passes (the control).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.judge_scenarios import judge_one, mi300x_snapshot, upgraded
from tests.workload_support import with_workload
from upgrade_gate.model import (
    GateReport,
    KernelEvent,
    Measurement,
    PhaseResult,
    PhaseStatus,
    Severity,
    Snapshot,
    replace,
)

BASE = with_workload(mi300x_snapshot())
LATENCY = "latency/all_reduce/time_us/1024"


def _with_latency(snap: Snapshot, samples: tuple[float, ...] | None) -> Snapshot:
    """Phase 2 with (or without: None) a small-message all_reduce latency."""
    two = next(p for p in snap.phases if p.phase == 2)
    kept = tuple(m for m in two.measurements if m.key != LATENCY)
    if samples is not None:
        kept += (Measurement(key=LATENCY, unit="us", samples=samples, source="phase 2", higher_is_better=False),)
    return replace(snap, phases=tuple(replace(p, measurements=kept) if p.phase == 2 else p for p in snap.phases))


BASE_LATENCY = _with_latency(BASE, (40.1, 40.3, 39.9, 40.0, 40.2))


def _healthy() -> Snapshot:
    return with_workload(upgraded(), seed=2)


def _probe(snap: Snapshot, name: str, **changes: object) -> Snapshot:
    return replace(snap, probes=tuple(replace(p, **changes) if p.name == name else p for p in snap.probes))


def _phase(snap: Snapshot, number: int, edit: Callable[[PhaseResult], PhaseResult]) -> Snapshot:
    return replace(snap, phases=tuple(edit(p) if p.phase == number else p for p in snap.phases))


def _drop(key: str) -> Callable[[PhaseResult], PhaseResult]:
    return lambda p: replace(p, measurements=tuple(m for m in p.measurements if m.key != key))


def _samples(key: str, samples: tuple[float, ...]) -> Callable[[PhaseResult], PhaseResult]:
    return lambda p: replace(
        p, measurements=tuple(replace(m, samples=samples) if m.key == key else m for m in p.measurements)
    )


def _twice(key: str) -> Callable[[PhaseResult], PhaseResult]:
    def edit(p: PhaseResult) -> PhaseResult:
        m = next(m for m in p.measurements if m.key == key)
        return replace(p, measurements=(*p.measurements, replace(m, samples=tuple(v / 2 for v in m.samples))))

    return edit


def _blocks(report: GateReport) -> list[str]:
    return [f"{f.rule}: {f.message}" for f in report.findings if f.severity is Severity.BLOCK]


def test_the_unedited_candidate_passes() -> None:
    report = judge_one(_healthy(), BASE)
    assert not _blocks(report), _blocks(report)
    assert not _blocks(judge_one(_with_latency(_healthy(), (40.5, 40.0, 40.2, 39.8, 40.1)), BASE_LATENCY))


PROBE_CLAIMS = {
    # a required probe failed, and the snapshot says it was not required
    "dmesg failed, marked not required": lambda s: _probe(
        s, "dmesg", ok=False, exit_code=1, required=False, reason="x"
    ),
    "lspci missing, marked not required": lambda s: _probe(
        s, "lspci", ok=False, missing=True, required=False, reason="x"
    ),
    # a probe that is no fallback for it claims to have stood in
    "dmesg failed, kernel claims to stand in": lambda s: _probe(
        _probe(s, "dmesg", ok=False, exit_code=1, reason="dmesg: read kernel buffer failed"),
        "kernel",
        fallback_for=("dmesg",),
    ),
    # an ok probe that also says what no ok probe can
    "ok but exited 1": lambda s: _probe(s, "lspci", exit_code=1),
    "a command probe skipped": lambda s: _probe(s, "ibv_devinfo", skipped=True),
}


@pytest.mark.parametrize("name", sorted(PROBE_CLAIMS))
def test_probe_flags_come_from_the_catalogue_not_from_the_candidate(name: str) -> None:
    blocks = _blocks(judge_one(PROBE_CLAIMS[name](_healthy()), BASE))
    assert any(b.startswith("evidence.missing: probe ") for b in blocks), blocks


def test_a_fallback_the_catalogue_names_still_stands_in() -> None:
    """amd-smi static failed and rocm-smi stood in: what `capture` writes for that, which is no false block."""
    snap = _probe(_healthy(), "amdsmi_static", ok=False, exit_code=1, reason="amd-smi: exit code 1")
    rocmsmi = replace(next(p for p in snap.probes if p.name == "amdsmi_list"), name="rocmsmi", required=False)
    snap = replace(snap, probes=(*snap.probes, replace(rocmsmi, fallback_for=("amdsmi_static",))))
    report = judge_one(snap, BASE)
    assert not [f for f in report.findings if f.rule == "evidence.missing" and f.device == "amdsmi_static"]


WORKLOAD_CLAIMS = {
    "throughput absent": (6, _drop("workload/samples_per_s"), "workload/samples_per_s is absent"),
    "throughput without samples": (6, _samples("workload/samples_per_s", ()), "has no samples"),
    "throughput recorded twice": (6, _twice("workload/samples_per_s"), "is recorded twice"),
    "timeouts absent": (6, _drop("workload/collective_timeouts"), "workload/collective_timeouts is absent"),
    "timeouts negative": (6, _samples("workload/collective_timeouts", (-1.0,)), "not a count"),
    "errors fractional": (6, _samples("workload/collective_errors", (0.5,)), "not a count"),
    "init absent": (6, _drop("workload/init_s"), "workload/init_s is absent"),
    "loss absent": (6, _drop("workload/loss"), "workload/loss is absent"),
    "throughput not finite": (6, _samples("workload/samples_per_s", (float("nan"),) * 5), "not finite"),
    "throughput zero": (6, _samples("workload/samples_per_s", (0.0,) * 5), "which no run measures"),
    "no device map": (6, lambda p: replace(p, device_map=()), "rank -> GPU map is empty"),
    "perturbation run absent": (7, _drop("perturbation/rotated/samples_per_s"), "rotated/samples_per_s is absent"),
    "perturbation without measurements": (7, lambda p: replace(p, measurements=()), "is absent"),
    "perturbation without device map": (7, lambda p: replace(p, device_map=()), "map is empty"),
}


@pytest.mark.parametrize("name", sorted(WORKLOAD_CLAIMS))
def test_a_passed_workload_phase_without_its_evidence_blocks(name: str) -> None:
    number, edit, said = WORKLOAD_CLAIMS[name]
    blocks = _blocks(judge_one(_phase(_healthy(), number, edit), BASE))
    hit = [b for b in blocks if b.startswith(f"workload.evidence: phase {number} (") and said in b]
    assert hit, blocks
    assert "passed, but" in hit[0] and hit[0].endswith("no evidence backs the pass")


def test_a_failed_workload_phase_is_phase_failed_not_a_contract_break() -> None:
    """A failed run may lack measurements (it stopped): `phase.failed` says so, the contract is for passes."""
    failed = _phase(_healthy(), 6, lambda p: replace(_drop("workload/loss")(p), status=PhaseStatus.FAILED))
    blocks = _blocks(judge_one(failed, BASE))
    assert any(b.startswith("phase.failed: phase 6") for b in blocks), blocks
    assert not [b for b in blocks if "no evidence backs the pass" in b]


@pytest.mark.parametrize(
    ("samples", "said"),
    [(None, "the candidate's phase 2 did not"), ((), "the candidate's phase 2 did not"), ((0.0,) * 5, "holds 0.0 µs")],
)
def test_a_latency_the_baseline_measured_must_be_measured_again(samples: tuple[float, ...] | None, said: str) -> None:
    blocks = _blocks(judge_one(_with_latency(_healthy(), samples), BASE_LATENCY))
    assert any(b.startswith("workload.evidence: ") and said in b for b in blocks), blocks


@pytest.mark.parametrize("version", ["6.2.0-rc1", "6.2.0-ERROR", "6.2.0-command not found"])
def test_a_planned_rocm_version_with_a_pre_release_or_an_error_text_does_not_land(version: str) -> None:
    snap = replace(_healthy(), software=replace(_healthy().software, rocm_version=version))
    blocks = _blocks(judge_one(snap, BASE))
    assert any(b.startswith(f"software.rocm: ROCm landed on {version}") for b in blocks), blocks


def test_a_build_suffix_still_lands() -> None:
    snap = replace(_healthy(), software=replace(_healthy().software, rocm_version="6.2.0-66"))
    assert not [b for b in _blocks(judge_one(snap, BASE)) if b.startswith("software.rocm")]


def test_another_node_class_than_the_baseline_blocks() -> None:
    snap = replace(_healthy(), node=replace(_healthy().node, node_class="mi250-4gpu"))
    blocks = _blocks(judge_one(snap, BASE))
    assert "evidence.missing: node class changed: mi300x-8gpu -> mi250-4gpu" in "\n".join(blocks), blocks
    unset = replace(_healthy(), node=replace(_healthy().node, node_class=None))  # takes its baseline's
    assert not [b for b in _blocks(judge_one(unset, BASE)) if "node class" in b]


def test_a_nic_listed_twice_blocks() -> None:
    snap = _healthy()
    snap = replace(snap, nics=(*snap.nics, snap.nics[0]))
    blocks = _blocks(judge_one(snap, BASE))
    assert any(b.startswith(f"nic.missing: NIC {snap.nics[0].name} is listed 2 times") for b in blocks), blocks


@pytest.mark.parametrize("where", ["labels", "annotations"])
def test_a_passed_phase_whose_own_labels_say_failed_blocks(where: str) -> None:
    def edit(p: PhaseResult) -> PhaseResult:
        return replace(p, **{where: {**getattr(p, where), "amd.com/gpu-hw-acceptance-x": "failed"}})

    blocks = _blocks(judge_one(_phase(_healthy(), 1, edit), BASE))
    assert any(b.startswith("phase.failed: phase 1 (") and "is marked passed, but" in b for b in blocks), blocks


def _scaled(snap: Snapshot, factor: float) -> tuple[Snapshot, str]:
    two = next(p for p in snap.phases if p.phase == 2)
    key = next(m.key for m in two.measurements if m.higher_is_better and m.samples)
    return _phase(
        snap, 2, _samples(key, tuple(v * factor for v in next(m for m in two.measurements if m.key == key).samples))
    ), key


def test_a_metric_a_hundred_times_better_than_its_baseline_is_broken_evidence() -> None:
    """1e6 GB/s at one size of a 127 GB/s sweep only warned (inconclusive): no change does that."""
    snap, key = _scaled(_healthy(), 1000.0)
    blocks = _blocks(judge_one(snap, BASE))
    assert any(b.startswith(f"bandwidth.not_comparable: {key}: ") and "the evidence is broken" in b for b in blocks), (
        blocks
    )
    snap, key = _scaled(_healthy(), 50.0)  # implausible too, but under the bound: the statistics judge it
    assert not [b for b in _blocks(judge_one(snap, BASE)) if "the evidence is broken" in b]


def test_a_sample_below_zero_is_broken_evidence_and_the_cause_of_its_curve() -> None:
    """A negative bandwidth read as "-198% at every size" led the node; the broken sample is the cause."""
    snap, key = _scaled(_healthy(), -1.0)
    report = judge_one(snap, BASE)
    blocks = _blocks(report)
    assert any(b.startswith(f"bandwidth.not_comparable: {key}: a sample of -") for b in blocks), blocks
    first = report.nodes[0].causes[0]
    assert first.headline.startswith("intra-node all_reduce bus bandwidth: broken evidence, " + key), first.headline
    assert "bandwidth.regression" in first.rules or "bandwidth.not_comparable" in first.rules


@pytest.mark.parametrize("vbios", ["N/A", "command not found", "bash: amd-smi: command not found"])
def test_a_vbios_that_reads_as_an_error_text_is_unreadable_evidence_first(vbios: str) -> None:
    """It read as "firmware moved outside the plan ... -> N/A": the version was never read."""
    snap = _healthy()
    snap = replace(snap, gpus=(replace(snap.gpus[0], vbios=vbios), *snap.gpus[1:]))
    report = judge_one(snap, BASE)
    assert report.verdict.value == "BLOCK"
    first = report.nodes[0].causes[0]
    assert first.headline.startswith("firmware unreadable on GPU") and repr(vbios) in first.headline, first.headline
    assert first.category.value == "evidence/tooling"


def test_a_gpu_listed_twice_leads_as_a_duplicate_not_as_a_partition_change() -> None:
    """It read "compute partition SPX -> SPX on 1 GPU (1 -> 2 logical GPUs)": the mode did not move."""
    snap = _healthy()
    snap = replace(snap, gpus=(*snap.gpus, replace(snap.gpus[3], index=len(snap.gpus))))
    report = judge_one(snap, BASE)
    first = report.nodes[0].causes[0]
    assert "is printed by 2 GPUs that are not partitions of one device" in first.headline, first.headline
    assert not [c for c in report.nodes[0].causes if c.headline.startswith("compute partition")]


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("other", "amdgpu 0000:15:00.0: amdgpu: GPU reset begin! ring gfx timeout"),
        (
            "amdgpu.ras_correctable",
            "amdgpu 0000:15:00.0: amdgpu: 3 uncorrectable hardware errors detected in umc block",
        ),
    ],
)
def test_a_kernel_event_is_judged_by_its_line_not_by_the_kind_it_claims(kind: str, text: str) -> None:
    event = KernelEvent(kind=kind, severity="warn", bdf=None, line_no=100, text=text)
    blocks = _blocks(judge_one(replace(_healthy(), events=(event,)), BASE))
    assert any(b.startswith("dmesg.fatal: dmesg: amdgpu.") and kind not in b.split(":")[2] for b in blocks), blocks


def test_a_metric_recorded_twice_in_one_phase_is_not_pooled() -> None:
    """A -20% sweep with a second copy of each metric at x1.5 pooled to "-0%, inconclusive" and passed: a phase
    merges its runs into one measurement a key (`validate.phases.sweeps.merge_samples`), so two are broken."""
    snap = _healthy()
    two = next(p for p in snap.phases if p.phase == 2)
    first = next(m for m in two.measurements if m.key.startswith("mesh/"))
    snap = _phase(snap, 2, lambda p: replace(p, measurements=(*p.measurements, replace(first, samples=first.samples))))
    blocks = _blocks(judge_one(snap, BASE))
    assert f"bandwidth.not_comparable: {first.key}: recorded twice in phase 2" in "\n".join(blocks), blocks
