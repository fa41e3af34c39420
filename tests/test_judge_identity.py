"""A GPU is its serial AND its unique id; partitions are told apart by (ids, PCIe function); identity
matching is O(n log n) (issue 10 items 2 and 8, issue 12 "superlinear judge")."""

from __future__ import annotations

from tests.judge_scenarios import NOW, SERIALS, UNIQUE_IDS, mi300x_snapshot
from upgrade_gate.judge.identity import MatchKind, canonical_uid, duplicate_ids, match_gpus
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import Bdf, GateReport, Gpu, GpuSerial, Severity, Snapshot, Verdict, replace


def _judge(candidate: Snapshot, baseline: Snapshot | None = None) -> GateReport:
    base = baseline if baseline is not None else mi300x_snapshot()
    return judge(
        baselines={base.node.name: base},
        candidates=[candidate],
        plan=None,
        policy=load_policy(),
        now=NOW,
        tool_version="test",
    )


def _blocking(report: GateReport) -> list[tuple[str, str | None]]:
    return sorted((f.rule, f.device) for f in report.findings if f.severity is Severity.BLOCK)


def _with_gpu(snap: Snapshot, index: int, **changes: object) -> Snapshot:
    return replace(snap, gpus=tuple(replace(g, **changes) if g.index == index else g for g in snap.gpus))  # type: ignore[arg-type]


def test_identity_unique_id_forms_of_the_three_tools_are_one_id() -> None:
    assert canonical_uid("GPU-28246ce5673b4aa0") == canonical_uid("0x28246CE5673B4AA0") == "0x28246ce5673b4aa0"
    assert canonical_uid("0x002F6A94E6C0D368") == canonical_uid("0x2f6a94e6c0d368")
    assert canonical_uid("N/A") is None and canonical_uid("0x0000000000000000") is None


def test_identity_serial_changed_with_same_unique_id_blocks() -> None:
    base = mi300x_snapshot()
    cand = _with_gpu(mi300x_snapshot(seed=2), 5, serial=GpuSerial("692409999999"))
    report = _judge(cand, base)
    assert report.verdict is Verdict.BLOCK
    label = f"unique_id={canonical_uid(UNIQUE_IDS[5])}"
    assert ("device.identity_changed", label) in _blocking(report)
    (f,) = [f for f in report.findings if f.rule == "device.identity_changed"]
    assert f.expected == SERIALS[5] and f.actual == "692409999999" and "index 5" in f.message


def test_identity_unique_id_changed_with_same_serial_blocks() -> None:
    cand = _with_gpu(mi300x_snapshot(seed=2), 2, unique_id="0xDEADBEEF00000001")
    report = _judge(cand)
    assert ("device.identity_changed", f"serial={SERIALS[2]}") in _blocking(report)


def test_identity_serial_no_longer_reported_blocks() -> None:
    cand = _with_gpu(mi300x_snapshot(seed=2), 1, serial=None)
    report = _judge(cand)
    assert any(r == "device.identity_changed" for r, _ in _blocking(report))


def test_identity_two_boards_with_one_serial_block_even_without_baseline() -> None:
    cand = _with_gpu(mi300x_snapshot(seed=2), 6, serial=SERIALS[1])
    (dup,) = duplicate_ids(cand.gpus)
    assert dup[0] == "serial" and dup[1] == SERIALS[1] and [g.index for g in dup[2]] == [1, 6]
    report = judge(
        baselines={},
        candidates=[cand],
        plan=None,
        policy=load_policy(),
        now=NOW,
        tool_version="test",
    )
    assert ("device.duplicate_id", f"serial={SERIALS[1]}") in _blocking(report)


# --------------------------------------------------------------------------- CPX partitions


def _cpx(n_devices: int = 2, parts: int = 8) -> Snapshot:
    """MI300X in CPX: each device's partitions share serial and UUID, BDF function = partition."""
    base = mi300x_snapshot()
    gpus = []
    for d in range(n_devices):
        bus = ("05", "15", "65", "75")[d]
        for p in range(parts):
            gpus.append(
                replace(
                    base.gpus[d],
                    index=d * parts + p,
                    bdf=Bdf(f"0000:{bus}:00.{p}"),
                    compute_partition="CPX",
                    compute_units=38,
                    vram_total_mib=24574,
                )
            )
    return replace(base, gpus=tuple(gpus), gpu_links=())


def test_identity_cpx_partitions_are_not_duplicates_and_match_by_function() -> None:
    snap = _cpx()
    assert duplicate_ids(snap.gpus) == []
    pairs = match_gpus(snap.gpus, snap.gpus)
    assert {p.kind for p in pairs} == {MatchKind.SERIAL}
    assert f"serial={SERIALS[0]},partition=5" in {p.label for p in pairs}
    assert all(p.baseline is p.candidate for p in pairs)
    assert _judge(snap, snap).verdict is Verdict.PASS


def test_identity_cpx_swapped_partitions_block_as_order_change() -> None:
    base = _cpx()
    gpus = list(base.gpus)
    gpus[3], gpus[4] = replace(gpus[4], index=3), replace(gpus[3], index=4)  # 05:00.3 and 05:00.4 swap
    report = _judge(replace(base, gpus=tuple(gpus)), base)
    assert report.verdict is Verdict.BLOCK
    (f,) = [f for f in report.findings if f.rule == "device.order_changed"]
    assert "index 3 was 0000:05:00.3" in f.message and "now 0000:05:00.4" in f.message


def test_identity_cpx_lost_partition_is_reported_under_its_index() -> None:
    base = _cpx()
    cand = replace(base, gpus=tuple(g for g in base.gpus if g.bdf != "0000:15:00.5"))
    cand = replace(cand, gpus=tuple(replace(g, index=i) for i, g in enumerate(cand.gpus)))
    report = _judge(cand, base)
    missing = [f for f in report.findings if f.rule == "device.missing"]
    assert [f.device for f in missing] == [f"serial={SERIALS[1]},partition=5"]
    assert "index 13" in missing[0].message and "0000:15:00.5" in missing[0].message


def test_identity_partition_sets_with_a_foreign_id_are_duplicates() -> None:
    snap = _cpx(n_devices=2, parts=2)
    # a second board claims the first board's serial but has its own UUID: a clone, not a partition
    gpus = tuple(replace(g, serial=SERIALS[0]) if g.bdf and g.bdf.startswith("0000:15") else g for g in snap.gpus)
    kinds = {(k, v) for k, v, _ in duplicate_ids(gpus)}
    assert ("serial", SERIALS[0]) in kinds


# --------------------------------------------------------------------------- scale


def _big(n: int) -> tuple[Gpu, ...]:
    return tuple(
        Gpu(
            index=i,
            bdf=Bdf(f"{i // 256:04x}:{i % 256:02x}:00.0"),
            serial=GpuSerial(f"SN{i:08d}"),
            unique_id=f"0x{(i + 1) * 7919:016X}",
            firmware={"PM": "1"},
        )
        for i in range(n)
    )


def test_identity_matching_of_ten_thousand_gpus_is_not_quadratic() -> None:
    # 10,008 GPUs took 689 s of CPU with pairwise scans; dictionary work makes this well under a second.
    # (No timed assert: a quadratic matcher would make this test run for minutes, which CI notices.)
    gpus = _big(10_008)
    reversed_ = tuple(replace(g, index=len(gpus) - 1 - g.index) for g in gpus)
    pairs = match_gpus(gpus, reversed_)
    assert len(pairs) == 10_008 and all(p.kind is MatchKind.SERIAL for p in pairs)
    assert duplicate_ids(gpus) == []
    base = replace(mi300x_snapshot(), gpus=gpus, gpu_links=(), pcie=(), nics=(), sriov=())
    report = _judge(replace(base, gpus=reversed_), base)
    (order,) = [f for f in report.findings if f.rule == "device.order_changed"]
    assert "index 0 was 0000:00:00.0" in order.message


def test_identity_board_swap_in_one_slot_is_one_replaced_finding() -> None:
    cand = _with_gpu(mi300x_snapshot(seed=2), 4, serial=GpuSerial("NEWBOARD1"), unique_id="0xABCDEF0123")
    assert _blocking(_judge(cand)) == [("device.replaced", "0000:85:00.0")]


def test_identity_pairs_carry_their_key_and_the_label_is_only_its_text() -> None:
    from upgrade_gate.judge.identity import GpuKey

    assert str(GpuKey(kind=MatchKind.SERIAL, value="692409006566", partition=3)) == "serial=692409006566,partition=3"
    assert str(GpuKey(kind=MatchKind.BDF, value="0000:05:00.0", candidate_only=True)) == "bdf=0000:05:00.0#candidate"
    base = _cpx()
    pairs = match_gpus(base.gpus, base.gpus)
    assert all(p.kind is p.key.kind and p.label == str(p.key) for p in pairs)
    assert {p.key.partition for p in pairs} == set(range(8))  # CPX partitions keyed by their BDF function


def test_equal_gpu_tuples_share_their_identities_and_pair_as_the_tiers_do() -> None:
    """A candidate whose GPUs equal the baseline's, field for field (the usual node), takes the baseline's
    identities instead of working them out again; the pairing is the tiers' own, and a candidate whose
    GPUs differ in one id gets its own identities."""
    from upgrade_gate.judge.identity import forget, identities, match_tiers

    base = mi300x_snapshot().gpus
    same = tuple(replace(g) for g in base)  # equal, not the same objects
    assert same == base and same is not base
    forget()
    assert match_gpus(base, same) == match_tiers(base, same)
    assert identities(same) is identities(base)
    other = (replace(base[0], serial="692400099999"), *base[1:])
    forget()
    pairs = match_gpus(base, other)
    assert identities(other) is not identities(base) and identities(other)[0].serial == "692400099999"
    assert pairs == match_tiers(base, other)
    forget()
