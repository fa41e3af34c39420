"""Hand-built workload evidence (phases 6 and 7) for judge and checklist tests that need no real run.

The numbers have the shape of a real run of reference_train.py (25 measured steps, a decreasing
loss, a 1.2 s init); the tests that run the script for real are in test_workload_phase.py.
"""

from __future__ import annotations

import random

from upgrade_gate.model import Bdf, Measurement, PhaseResult, PhaseStatus, RankDevice, Snapshot, replace
from upgrade_gate.validate import cvf

SETTINGS = {
    "backend": "nccl", "device": "cuda", "precision": "bf16", "model": "resnet-w16-b1", "batch_size": "32",
    "steps": "30", "warmup": "5", "world_size": "8",
}  # fmt: skip
LOSS = tuple(round(2.4 * 0.97**i, 6) for i in range(30))


def _m(key: str, unit: str, samples: tuple[float, ...], source: str) -> Measurement:
    better = unit == "samples/s"
    settings = dict(SETTINGS)
    return Measurement(key=key, unit=unit, samples=samples, settings=settings, source=source, higher_is_better=better)


def rates(seed: int, nominal: float = 1528.0, noise: float = 0.02, n: int = 25) -> tuple[float, ...]:
    """Per-step samples/s with Gaussian noise (seeded)."""
    rng = random.Random(seed)
    return tuple(round(nominal * (1 + rng.gauss(0, noise)), 3) for _ in range(n))


def device_map(snap: Snapshot, visible: str | None = None, order: list[int] | None = None) -> tuple[RankDevice, ...]:
    """Rank r on the r-th GPU by BDF (or on GPU `order[r]`), as the workload's runtime would report it."""
    gpus = sorted(snap.gpus, key=lambda g: str(g.bdf))
    pick = order or list(range(len(gpus)))
    return tuple(
        RankDevice(rank=r, bdf=Bdf(str(gpus[i].bdf)), uuid=f"GPU-{gpus[i].unique_id or i}", visible=visible)
        for r, i in enumerate(pick)
    )


def with_workload(
    snap: Snapshot,
    *,
    seed: int = 1,
    rate: float = 1528.0,
    init_s: float = 1.2,
    loss: tuple[float, ...] = LOSS,
    timeouts: int = 0,
    perturbed_order: list[int] | None = None,
    spread: float | None = 4.0,
) -> Snapshot:
    """`snap` with a passed phase 6 and phase 7 (the perturbation keeps ranks unless `perturbed_order`);
    `spread`: phase 6's GPU utilisation spread in points (the incident's healthy 4; None: not sampled)."""
    src6, src7 = "phase 6 workload", "phase 7 perturbation"
    six = PhaseResult(
        phase=6,
        name="workload",
        status=PhaseStatus.PASSED,
        labels={cvf.WORKLOAD_VALIDATION: "passed"},
        measurements=(
            _m("workload/samples_per_s", "samples/s", rates(seed, rate), src6),
            _m("workload/loss", "loss", loss, src6),
            _m("workload/init_s", "s", (init_s,), src6),
            _m("workload/collective_timeouts", "count", (float(timeouts),), src6),
            _m("workload/collective_errors", "count", (0.0,), src6),
            _m("workload/collective_warnings", "count", (0.0,), src6),
            *((_m("workload/gfx_util_spread_pct", "%", (spread,), src6),) if spread is not None else ()),
        ),
        device_map=device_map(snap),
    )
    perturbed = []
    for how in ("reversed", "rotated"):
        perturbed += [
            _m(f"perturbation/{how}/samples_per_s", "samples/s", rates(seed + 7, rate), src7),
            _m(f"perturbation/{how}/loss", "loss", loss, src7),
        ]
    seven = PhaseResult(
        phase=7,
        name="perturbation",
        status=PhaseStatus.PASSED,
        labels={cvf.PERTURBATION_VALIDATION: "passed"},
        measurements=tuple(perturbed),
        device_map=(
            *device_map(snap, "reversed (HIP_VISIBLE_DEVICES=7,6,5,4,3,2,1,0)", perturbed_order),
            *device_map(snap, "rotated (HIP_VISIBLE_DEVICES=1,2,3,4,5,6,7,0)", perturbed_order),
        ),
    )
    kept = tuple(p for p in snap.phases if p.phase < 6)
    return replace(snap, phases=(*kept, six, seven))
