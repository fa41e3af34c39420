"""`model.columnar.Layout`: what a v2 decode's measurements were built from, which the diff
(`diff._unchanged`) and the comparable-key pairing (`rules.measured._pair`) compare instead of every
metric. The shortcut must answer exactly what the per-metric comparison answers (issue 29)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_schema_v2 import rich_snapshot
from upgrade_gate.judge.diff import diff_snapshots
from upgrade_gate.judge.rules import measured
from upgrade_gate.model import Measurement, Snapshot, replace
from upgrade_gate.model.columnar import _LAYOUTS_KEPT, forget_layouts, layout_of
from upgrade_gate.snapshot.io import decode_snapshot, dumps_snapshot

_EDITS = ("none", "unit", "settings", "settings_order", "samples", "count", "key", "move", "source", "direction")


def _edited(snap: Snapshot, edit: str, phase: int, metric: int) -> Snapshot:
    """`snap` with one metric of one phase edited (`_EDITS`)."""
    phases = list(snap.phases)
    ms = list(phases[phase].measurements)
    if not ms:
        return snap
    m = ms[metric % len(ms)]
    if edit == "unit":
        m = replace(m, unit=m.unit + "x")
    elif edit == "settings":
        m = replace(m, settings={**m.settings, "ranks": "3"})
    elif edit == "settings_order":
        m = replace(m, settings=dict(reversed(list(m.settings.items()))))
    elif edit == "samples":
        m = replace(m, samples=tuple(v * 0.5 for v in m.samples))
    elif edit == "count":
        m = replace(m, samples=(*m.samples, 1.0))
    elif edit == "key":
        m = replace(m, key=m.key + "/x")
    elif edit == "source":
        m = replace(m, source="other")
    elif edit == "direction":
        m = replace(m, higher_is_better=not m.higher_is_better)
    if edit == "move":  # the same metric, listed in the snapshot's own measurements instead of its phase's
        moved: Measurement = ms.pop(metric % len(ms))
        phases[phase] = replace(phases[phase], measurements=tuple(ms))
        return replace(snap, measurements=(*snap.measurements, moved), phases=tuple(phases))
    ms[metric % len(ms)] = m
    phases[phase] = replace(phases[phase], measurements=tuple(ms))
    return replace(snap, phases=tuple(phases))


def _decoded(snap: Snapshot) -> Snapshot:
    return decode_snapshot(dumps_snapshot(snap, version="2").encode(), source="x")


def _answers(base: Snapshot, cand: Snapshot) -> tuple[object, ...]:
    measured.forget()
    return (
        diff_snapshots(base, cand),
        measured.comparable_keys(base, cand, ()),
        measured.comparable_keys(base, cand, ("ranks",)),
    )


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(_EDITS), st.sampled_from((0, 2)), st.integers(0, 5))
def test_the_layout_shortcut_answers_what_the_per_metric_comparison_answers(edit: str, phase: int, metric: int) -> None:
    base = rich_snapshot()
    cand = _edited(base, edit, phase, metric)
    b, c = _decoded(base), _decoded(cand)
    assert layout_of(b) is not None and layout_of(c) is not None
    shortcut = _answers(b, c)
    forget_layouts()  # the same snapshots, compared metric by metric
    assert layout_of(b) is None and layout_of(c) is None
    assert _answers(b, c) == shortcut
    assert _answers(base, cand) == shortcut  # and as the model objects themselves, never decoded


def test_equal_layouts_of_two_decodes_are_compared_by_identity_and_differ_where_the_metrics_do() -> None:
    forget_layouts()
    b, c = _decoded(rich_snapshot()), _decoded(rich_snapshot())
    lb, lc = layout_of(b), layout_of(c)
    assert lb is not None and lc is not None and lb == lc
    assert all(x[0] is y[0] and x[1] is y[1] and x[2] is y[2] for x, y in zip(lb.parts, lc.parts, strict=True))
    more = _decoded(_edited(rich_snapshot(), "count", 0, 0))
    assert layout_of(more) != lb and "measurements" in str(diff_snapshots(b, more))


def test_layouts_are_kept_for_v2_decodes_only_and_bounded() -> None:
    forget_layouts()
    v1 = decode_snapshot(dumps_snapshot(rich_snapshot()).encode(), source="x")
    assert layout_of(v1) is None and layout_of(rich_snapshot()) is None
    kept = [_decoded(rich_snapshot(f"node-{i}")) for i in range(_LAYOUTS_KEPT + 3)]
    assert layout_of(kept[-1]) is not None
    from upgrade_gate.model import columnar

    assert len(columnar._LAYOUTS) <= _LAYOUTS_KEPT  # emptied when full: never holds more snapshots
    forget_layouts()
    assert all(layout_of(s) is None for s in kept)
