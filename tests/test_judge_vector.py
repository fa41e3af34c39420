"""The judge's batch and fast paths (issue 29) give exactly what the per-node, per-key code gives.

Each fast path skips work only where the plain definition provably gives the same answer (a finite
grand sum means every partial sum is finite; min and max inside the bounds mean every sample is);
these tests hold each against that plain definition on generated nodes and on hostile values, and the
whole judge's batch against node-by-node judging, finding for finding.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from tests.judge_scenarios import (
    mi300x_snapshot,
    reverse_order,
    scale_metrics,
    set_firmware,
    upgrade_plan,
    upgraded,
)
from upgrade_gate.judge.judge import judge_node, judge_nodes
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.judge.rules import REGISTRY, bandwidth, measured, thermal
from upgrade_gate.judge.rules.base import NodeContext
from upgrade_gate.model import Measurement, NodeName, Snapshot, replace

POLICIES = Path(__file__).parent / "fixtures" / "judge" / "policies"
INF, NAN = float("inf"), float("nan")


def _with(snap: Snapshot, *extra: Measurement) -> Snapshot:
    return replace(snap, measurements=(*snap.measurements, *extra))


def _m(key: str, samples: tuple[float, ...], unit: str = "GB/s", **settings: str) -> Measurement:
    return Measurement(key=key, unit=unit, samples=samples, settings=settings, source="test")


def _plain_entry(snapshot: Snapshot) -> tuple[frozenset[str], tuple[str, ...], tuple[str, ...]]:
    """`rules.measured`'s entry as it was defined key by key (usable keys, bandwidth keys, thermal keys)."""
    merged, _ = measured._merge(snapshot)
    ok = frozenset(k for k, m in merged.items() if measured.usable(m.samples))
    therm = [k for k in merged if k.startswith(measured.THERMAL_PREFIX)]
    own = [k for k in merged if k.startswith(measured.WORKLOAD_PREFIXES)]
    band = sorted(merged.keys() - set(therm) - set(own)) if therm or own else sorted(merged)
    return ok, tuple(band), tuple(therm)


HOSTILE = {
    "nan": (_m("mesh/x/busbw/1", (1.0, NAN, 2.0)),),
    "inf": (_m("mesh/x/busbw/1", (INF,)),),
    "minus-inf": (_m("mesh/x/busbw/1", (-INF, 3.0)),),
    "empty": (_m("mesh/x/busbw/1", ()),),
    "one-overflows": (_m("mesh/x/busbw/1", (1e308, 1e308)),),
    "grand-sum-overflows": (_m("mesh/x/busbw/1", (1e308,)), _m("mesh/x/busbw/2", (1e308,))),
    "inf-and-minus-inf": (_m("mesh/x/busbw/1", (INF,)), _m("mesh/x/busbw/2", (-INF,))),
    "duplicate-key": (_m("mesh/all_reduce/busbw/1024", (1.0, 2.0)),),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_merged_entry_usable_keys_equal_the_per_key_definition(case: str) -> None:
    snap = _with(mi300x_snapshot(), *HOSTILE[case])
    measured.forget()
    _, ok, band, therm = measured._build_entry(snap)
    assert (ok, band, therm) == _plain_entry(snap)


def test_merged_entry_equals_the_per_key_definition_on_generated_nodes() -> None:
    for seed in range(1, 6):
        for snap in (mi300x_snapshot(seed=seed), upgraded(seed=seed + 10)):
            _, ok, band, therm = measured._build_entry(snap)
            assert (ok, band, therm) == _plain_entry(snap)
            assert ok == frozenset(k for k, m in measured._merge(snap)[0].items() if m.samples)  # all usable here


def test_rule_for_remembers_exactly_what_the_scan_answers() -> None:
    policy = load_policy(POLICIES / "site.yaml")
    classes = (None, "mi300x-8gpu", "lab-nodes", "no-such-class")
    for _ in range(2):  # asked twice: the second answer comes from the cache
        for rule_id in REGISTRY:
            for cls in classes:
                assert policy.rule_for(rule_id, cls) is policy._rule_for(rule_id, cls)


def test_rule_for_cache_follows_a_replaced_policy_and_does_not_change_equality() -> None:
    policy = load_policy()
    asked = policy.rule_for("pcie.downgrade", None)
    assert asked is not None
    fewer = dataclasses.replace(policy, rules=tuple(e for e in policy.rules if e.id != "pcie.downgrade"))
    assert fewer.rule_for("pcie.downgrade", None) is None
    assert policy.rule_for("pcie.downgrade", None) is asked
    assert policy == load_policy()  # the remembered answers are no part of the value
    assert "_found" not in repr(policy)


def _plain_value(m: Measurement) -> float | None:
    usable = [s for s in m.samples if s == s and abs(s) != INF]
    return max(usable) if usable else None


def _plain_unusable_sample(m: Measurement, name: str) -> str | None:
    known = thermal._UNDERSTOOD[name]
    for s in m.samples:
        if not math.isfinite(s) or not known.low < s <= known.high:
            return f"{s:g}"
    return None


SAMPLES = [
    (64.0,),
    (63.0, 65.5, 64.0),
    (15.0,),  # the low bound itself is not plausible (low < value)
    (15.0000001,),
    (150.0,),  # the high bound is (value <= high)
    (150.0000001,),
    (64.0, NAN),
    (NAN, 64.0),
    (INF,),
    (-INF, 64.0),
    (64.0, 200.0, 10.0),
    (0.0,),
    (-1.0, 64.0),
    (1e308, 1e308),
]


@pytest.mark.parametrize("samples", SAMPLES, ids=[repr(s) for s in SAMPLES])
def test_thermal_reading_fast_paths_equal_the_sample_loop(samples: tuple[float, ...]) -> None:
    m = _m("thermal/gpu0/temp_c_max", samples, unit="C", tool="amd-smi monitor", sensor="hotspot")
    value = thermal._value(m)
    plain = _plain_value(m)
    assert value == plain or (value is not None and plain is not None and math.isnan(value) and math.isnan(plain))
    why = thermal._unusable(m, "temp_c_max")
    shown = _plain_unusable_sample(m, "temp_c_max")
    assert (why is None) == (shown is None)
    if why is not None:
        assert why[1] == shown  # the same first offending sample is named


def _contexts(pairs: list[tuple[Snapshot, Snapshot]]) -> list[NodeContext]:
    from upgrade_gate.judge.judge import _context

    return [_context(c, b, upgrade_plan(), load_policy(), {}, {}) for c, b in pairs]


def test_regression_rows_fast_path_equals_the_general_loop() -> None:
    entry = load_policy().rule_for(bandwidth.REGRESSION, None)
    assert entry is not None
    general = dataclasses.replace(entry, params={**entry.params, "tolerance_overrides": {"no/such/metric": 0.5}})
    for ctx in _contexts([(upgraded(seed=s + 20), mi300x_snapshot(seed=s)) for s in range(1, 4)]):
        fast = bandwidth.regression_rows(ctx, entry)
        assert fast, "the generated node has comparable metrics"
        assert fast == bandwidth.regression_rows(ctx, general)


def _fleet() -> list[tuple[Snapshot, Snapshot]]:
    """Generated nodes with and without faults: healthy, a bandwidth drop, a firmware change, an order change."""
    out = []
    faults = [
        lambda s: s,
        lambda s: scale_metrics(s, 0.85, lambda k: k.startswith("mesh/")),
        lambda s: set_firmware(s, "SMC", "99.99.99"),
        reverse_order,
        lambda s: scale_metrics(s, 0.97, lambda k: k.startswith("rail/")),
    ]
    for i in range(10):
        name = NodeName(f"vec-node-{i:02d}")
        base = mi300x_snapshot(seed=i + 1)
        cand = faults[i % len(faults)](upgraded(seed=i + 40))
        out.append(
            (replace(cand, node=replace(cand.node, name=name)), replace(base, node=replace(base.node, name=name)))
        )
    return out


def test_judge_batch_equals_node_by_node_judging_on_generated_nodes() -> None:
    pairs = _fleet()
    policy, plan = load_policy(), upgrade_plan()
    batch = judge_nodes(pairs, plan=plan, policy=policy, references={}, denylist={})
    alone = [
        judge_node(candidate=c, baseline=b, plan=plan, policy=policy, references={}, denylist={}) for c, b in pairs
    ]
    assert batch == alone
    verdicts = [report.verdict.value for report, _ in batch]
    assert verdicts.count("BLOCK") >= 4  # the faults are seen, so the comparison covers findings too
