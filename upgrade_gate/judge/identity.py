"""Match the GPUs of two snapshots by immutable identity, the lesson of the incident.

A GPU's index is the order HIP and RCCL enumerate it in and its BDF is the slot it sits in; neither
says which physical device it is. So GPUs are paired, in this order of trust:

1. by serial (the board serial amd-smi / rocm-smi print),
2. by unique id (the ASIC serial, also the `GPU-<hex>` UUID of rocminfo),
3. by BDF, only when at least one side has no usable id at all: this pairing is "identity
   unverified" and the judge says so (a warning). Two GPUs in the same slot whose ids both exist and
   differ are never paired: that is a replaced device, not the same one.
4. by index, only when neither side has an id nor a BDF (also unverified).

An id is *usable* only when it is not a placeholder (rocm-smi prints serial "0" and unique id "N/A" on
parts without a FRU, see corpus rocm-smi/mi100-6gpu-json-all-rocm5.7.1-telegraf.json) and occurs once
in its snapshot: a duplicated id cannot identify anything, so it is treated as absent.

Each pair gets a *label* (`serial=692409006566`, `unique_id=0x28246ce5673b4aa0`, `bdf=0000:05:00.0`,
`index=3`) used in diff paths (`gpus[serial=...]`) and finding devices; unmatched GPUs get the label
of their most trusted usable id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from upgrade_gate.model import Gpu

PLACEHOLDER_IDS = frozenset(
    {"", "0", "n/a", "na", "none", "null", "unknown", "unsupported", "0x0", "0x00000000", "0x0000000000000000"}
)


class MatchKind(StrEnum):
    """How a GPU pair was matched; BDF and INDEX mean the identity is unverified."""

    SERIAL = "serial"
    UNIQUE_ID = "unique_id"
    BDF = "bdf"
    INDEX = "index"

    @property
    def verified(self) -> bool:
        """True when the pairing rests on an immutable id."""
        return self in (MatchKind.SERIAL, MatchKind.UNIQUE_ID)


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuPair:
    """One GPU as seen in the baseline and/or the candidate (None on the side it is absent from)."""

    label: str
    kind: MatchKind
    baseline: Gpu | None
    candidate: Gpu | None


def normalise_id(value: str | None) -> str | None:
    """The comparable form of a serial / unique id, or None for a placeholder."""
    if value is None:
        return None
    text = value.strip()
    return None if text.lower() in PLACEHOLDER_IDS else text


def _norm_uid(value: str | None) -> str | None:
    text = normalise_id(value)
    return text.lower() if text is not None else None


def _usable(gpus: Sequence[Gpu], kind: MatchKind) -> dict[int, str]:
    """position -> id for the GPUs whose id of `kind` is usable (present, not a placeholder, unique)."""
    raw: dict[int, str] = {}
    for pos, gpu in enumerate(gpus):
        value: str | None
        if kind is MatchKind.SERIAL:
            value = normalise_id(gpu.serial)
        elif kind is MatchKind.UNIQUE_ID:
            value = _norm_uid(gpu.unique_id)
        elif kind is MatchKind.BDF:
            value = str(gpu.bdf) if gpu.bdf is not None else None
        else:
            value = str(gpu.index)
        if value is not None:
            raw[pos] = value
    counts: dict[str, int] = {}
    for value in raw.values():
        counts[value] = counts.get(value, 0) + 1
    return {pos: value for pos, value in raw.items() if counts[value] == 1}


def gpu_label(gpu: Gpu, gpus: Sequence[Gpu]) -> str:
    """The label of one GPU within its own snapshot (most trusted usable id first)."""
    pos = next(i for i, g in enumerate(gpus) if g is gpu)
    for kind in MatchKind:
        ids = _usable(gpus, kind)
        if pos in ids:
            return f"{kind.value}={ids[pos]}"
    return f"index={gpu.index}"  # pragma: no cover - index is always usable unless duplicated


def match_gpus(baseline: Sequence[Gpu], candidate: Sequence[Gpu]) -> tuple[GpuPair, ...]:
    """Pair baseline and candidate GPUs (see the module docstring); unmatched ones stand alone."""
    left = set(range(len(baseline)))
    right = set(range(len(candidate)))
    pairs: list[GpuPair] = []
    b_ids = {kind: _usable(baseline, kind) for kind in MatchKind}
    c_ids = {kind: _usable(candidate, kind) for kind in MatchKind}

    def _conflicting(bi: int, ci: int) -> bool:
        # Both sides carry the same kind of usable id and the ids differ: different devices.
        return any(
            bi in b_ids[k] and ci in c_ids[k] and b_ids[k][bi] != c_ids[k][ci]
            for k in (MatchKind.SERIAL, MatchKind.UNIQUE_ID)
        )

    for kind in MatchKind:
        by_value = {value: ci for ci, value in c_ids[kind].items() if ci in right}
        for bi in sorted(left):
            value = b_ids[kind].get(bi)
            if value is None or value not in by_value:
                continue
            ci = by_value[value]
            if ci not in right:
                continue
            if not kind.verified and _conflicting(bi, ci):
                continue
            if kind is MatchKind.INDEX and (baseline[bi].bdf is not None or candidate[ci].bdf is not None):
                continue
            pairs.append(
                GpuPair(label=f"{kind.value}={value}", kind=kind, baseline=baseline[bi], candidate=candidate[ci])
            )
            left.discard(bi)
            right.discard(ci)
            del by_value[value]
    for bi in sorted(left):
        gpu = baseline[bi]
        pairs.append(GpuPair(label=gpu_label(gpu, baseline), kind=_best(gpu, baseline), baseline=gpu, candidate=None))
    for ci in sorted(right):
        gpu = candidate[ci]
        label = gpu_label(gpu, candidate)
        if any(p.label == label for p in pairs):  # same slot, different device: keep labels distinct
            label = f"{label}#candidate"
        pairs.append(GpuPair(label=label, kind=_best(gpu, candidate), baseline=None, candidate=gpu))
    return tuple(pairs)


def _best(gpu: Gpu, gpus: Sequence[Gpu]) -> MatchKind:
    return MatchKind(gpu_label(gpu, gpus).split("=", 1)[0])


def rocr_uuid(gpu: Gpu) -> str | None:
    """The `GPU-<hex>` UUID rocminfo prints and ROCR_VISIBLE_DEVICES accepts, from the unique id."""
    uid = _norm_uid(gpu.unique_id)
    if uid is None:
        return None
    if uid.startswith("gpu-"):
        return "GPU-" + uid[4:]
    return "GPU-" + uid.removeprefix("0x")
