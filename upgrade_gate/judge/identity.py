"""Match the GPUs of two snapshots by immutable identity, the lesson of the incident.

A GPU's index is the order HIP and RCCL enumerate it in and its BDF is the slot it sits in; neither
says which physical device it is. A GPU *is* its board serial (amd-smi BOARD.PRODUCT_SERIAL, rocm-smi
"Serial Number") together with its unique id (the ASIC serial, rocminfo's `GPU-<hex>` UUID): either
one changing on a matched GPU is a finding of its own (`device.identity_changed`, see
`rules.devices`), never a silent re-pairing.

Compute partitions (MI300X DPX/QPX/CPX) share both ids: every partition of one device prints the same
serial and UUID and differs only in the PCIe function of its BDF (05:00.0 ... 05:00.7; AMD documents
that the partition id sits in the BDF function, ROCm/rocm_smi_lib#208, ROCm/rocm-systems#5805). So a
GPU's *partition* is the function of its BDF, and identity keys are (id, partition). Without a BDF a
partition falls back to its ordinal among the GPUs sharing its ids (by index), which is unverified.

GPUs are paired in this order of trust:
1. (serial, partition), 2. (unique id, partition): the normal case, also for partitions;
3. serial alone, 4. unique id alone: one side lost its BDF, the id still identifies the device;
5. by BDF, only when at least one side has no usable id at all: "identity unverified" (a warning).
   Two GPUs in the same slot whose ids both exist and differ are never paired: a replaced device;
6. by index, only when neither side has an id nor a BDF (also unverified).

An id is *usable* for a key only when it is not a placeholder (rocm-smi prints serial "0" and unique
id "N/A" on parts without a FRU, see corpus rocm-smi/mi100-6gpu-json-all-rocm5.7.1-telegraf.json) and
the key occurs once in its snapshot: a duplicated key cannot identify anything (`duplicate_ids` names
those, and the devices rule blocks on them). Unique ids are compared in one canonical form (`0x` +
lower-case hex without leading zeros), since rocminfo (`GPU-`), amd-smi (`0x`, 16 upper-case digits)
and rocm-smi (`hex()`) print the same number three ways.

Each pair gets a `GpuKey` (kind, value, partition) whose text is its *label* (`serial=692409006566`,
`serial=692409006566,partition=3`, `unique_id=0x28246ce5673b4aa0`, `bdf=0000:05:00.0`, `index=3`) used
in diff paths and finding devices; code that needs the kind reads the key, never the label.
Everything here is dictionary work: O(n log n) in the GPU count (a 10,008-GPU snapshot used
to take minutes of CPU in pairwise scans).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from upgrade_gate.judge.idcache import IdCache
from upgrade_gate.model import Gpu, replace
from upgrade_gate.parse.bdf import address_of

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
class GpuKey:
    """What identifies a GPU in diff paths and findings: the kind of key, its value, its partition.

    `str()` is the label (`serial=X`, `serial=X,partition=3`, `unique_id=0x..`, `bdf=..`, `index=3`,
    with `#candidate` when a candidate GPU's key collides with an unmatched baseline GPU's); this is
    the one place that writes it, and nothing parses it back: code that needs the kind reads `kind`.
    """

    kind: MatchKind
    value: str
    partition: int | None = None
    candidate_only: bool = False

    def __str__(self) -> str:
        part = f",partition={self.partition}" if self.partition is not None else ""
        return f"{self.kind.value}={self.value}{part}{'#candidate' if self.candidate_only else ''}"

    @classmethod
    def of_slot(cls, gpu: Gpu) -> GpuKey:
        """The key of a GPU known by its slot only (its BDF, else its index)."""
        if gpu.bdf is not None:
            return cls(kind=MatchKind.BDF, value=str(gpu.bdf))
        return cls(kind=MatchKind.INDEX, value=str(gpu.index))


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuPair:
    """One GPU as seen in the baseline and/or the candidate (None on the side it is absent from)."""

    key: GpuKey
    baseline: Gpu | None
    candidate: Gpu | None

    @property
    def kind(self) -> MatchKind:
        """How the pair was matched (BDF and INDEX: identity unverified)."""
        return self.key.kind

    @property
    def label(self) -> str:
        """The pair's label in diff paths and finding devices."""
        return str(self.key)


def normalise_id(value: str | None) -> str | None:
    """The comparable form of a serial, or None for a placeholder."""
    if value is None:
        return None
    text = value.strip()
    return None if text.lower() in PLACEHOLDER_IDS else text


def canonical_uid(value: str | None) -> str | None:
    """A unique id as `0x<lower-case hex, no leading zeros>` (any of the tools' forms), None if a placeholder."""
    text = normalise_id(value)
    if text is None:
        return None
    low = text.lower().removeprefix("gpu-").removeprefix("0x")
    try:
        number = int(low, 16)
    except ValueError:
        return text.lower()
    return None if number == 0 else f"0x{number:x}"


def _slot(gpu: Gpu) -> tuple[int, int, int] | None:
    """(domain, bus, device) of the GPU's BDF: its physical device whatever the partition."""
    address = address_of(gpu.bdf)
    return address.slot if address is not None else None


def _function(gpu: Gpu) -> int | None:
    address = address_of(gpu.bdf)
    return address.function if address is not None else None


class Ident(NamedTuple):
    """A GPU's identity within its snapshot: ids, partition, whether it shares its ids with others.

    A tuple, not a frozen dataclass: the judge builds one per GPU of both snapshots of every node
    (~0.5 against ~0.8 us each, timeit on the 2-core box, 2026-12-07)."""

    serial: str | None
    uid: str | None
    partition: int | None
    shared: bool  # another GPU of the snapshot prints the same ids (a partition of one device)

    def key(self, gpu: Gpu, kind: MatchKind) -> GpuKey:
        """The key of this GPU of `kind`."""
        part = self.partition if self.shared else None
        if kind is MatchKind.SERIAL and self.serial is not None:
            return GpuKey(kind=kind, value=self.serial, partition=part)
        if kind is MatchKind.UNIQUE_ID and self.uid is not None:
            return GpuKey(kind=kind, value=self.uid, partition=part)
        return GpuKey.of_slot(gpu)


_IDENTITIES: IdCache[tuple[Gpu, ...], list[Ident]] = IdCache(256)  # a judge batch: two snapshots a node


_LABELS: IdCache[tuple[GpuPair, ...], dict[int, str]] = IdCache(128)  # a judge batch: one pairing a node


def forget() -> None:
    """Drop the cached identities and labels (the judge calls it after each batch: the caches hold the GPUs)."""
    _IDENTITIES.clear()
    _LABELS.clear()


def candidate_labels(pairs: Sequence[GpuPair]) -> dict[int, str]:
    """Candidate GPU (by object id) -> its pair's label, for one node's pairing (do not mutate the dict).

    Several rules label the same node's GPUs (firmware, VBIOS, GPU health): a pairing tuple's labels are
    written once per batch (`judge.idcache`); other sequences are labelled each time."""
    if type(pairs) is not tuple:
        return _candidate_labels(pairs)
    return _LABELS.get(pairs, _candidate_labels)


def _candidate_labels(pairs: Sequence[GpuPair]) -> dict[int, str]:
    return {id(p.candidate): p.label for p in pairs if p.candidate is not None}


def identities(gpus: Sequence[Gpu]) -> list[Ident]:
    """The identity of every GPU of one snapshot, in the same order (do not mutate the list).

    Several rules ask for the same snapshot's identities: a snapshot's GPU tuple is computed once
    (`judge.idcache`); other sequences are computed each time."""
    if type(gpus) is not tuple:
        return _identities(gpus)
    return _IDENTITIES.get(gpus, _identities)


def _identities(gpus: Sequence[Gpu]) -> list[Ident]:
    serials = [normalise_id(g.serial) for g in gpus]
    uids = [canonical_uid(g.unique_id) for g in gpus]
    groups: dict[tuple[str | None, str | None], list[int]] = {}
    for pos, key in enumerate(zip(serials, uids, strict=True)):
        if key != (None, None):
            groups.setdefault(key, []).append(pos)
    out: list[Ident] = []
    ordinal: dict[int, int] = {}
    for members in groups.values():
        if len(members) > 1:
            for n, pos in enumerate(sorted(members, key=lambda p: gpus[p].index)):
                ordinal[pos] = n
    for pos, gpu in enumerate(gpus):
        key = (serials[pos], uids[pos])
        shared = key != (None, None) and len(groups[key]) > 1
        fn = _function(gpu)
        partition = fn if fn is not None else ordinal.get(pos)
        out.append(Ident(serial=serials[pos], uid=uids[pos], partition=partition, shared=shared))
    return out


def _unique(keys: dict[int, Hashable]) -> dict[int, Hashable]:
    counts = Counter(keys.values())
    return {pos: key for pos, key in keys.items() if counts[key] == 1}


def _keys(gpus: Sequence[Gpu], ids: Sequence[Ident]) -> dict[str, dict[int, Hashable]]:
    """Per tier, position -> key for the GPUs whose key is usable (present and unique)."""
    tiers: dict[str, dict[int, Hashable]] = {"serial_part": {}, "uid_part": {}, "serial": {}, "uid": {}, "bdf": {}}
    for pos, (gpu, ident) in enumerate(zip(gpus, ids, strict=True)):
        if ident.serial is not None:
            tiers["serial_part"][pos] = (ident.serial, ident.partition)
            tiers["serial"][pos] = ident.serial
        if ident.uid is not None:
            tiers["uid_part"][pos] = (ident.uid, ident.partition)
            tiers["uid"][pos] = ident.uid
        if gpu.bdf is not None:
            tiers["bdf"][pos] = str(gpu.bdf)
    return {name: _unique(keys) for name, keys in tiers.items()}


_TIERS = (
    ("serial_part", MatchKind.SERIAL),
    ("uid_part", MatchKind.UNIQUE_ID),
    ("serial", MatchKind.SERIAL),
    ("uid", MatchKind.UNIQUE_ID),
    ("bdf", MatchKind.BDF),
)


def best_key(gpu: Gpu, ident: Ident, usable: dict[str, dict[int, Hashable]], pos: int) -> GpuKey:
    """The key of an unmatched GPU: its most trusted usable one."""
    for tier, kind in _TIERS:
        if pos in usable[tier]:
            return ident.key(gpu, kind)
    if ident.serial is not None:
        return ident.key(gpu, MatchKind.SERIAL)
    if ident.uid is not None:
        return ident.key(gpu, MatchKind.UNIQUE_ID)
    return GpuKey(kind=MatchKind.INDEX, value=str(gpu.index))


def _same_serials(b_ids: Sequence[Ident], c_ids: Sequence[Ident]) -> bool:
    """True when the tiers below would pair position i with position i on its serial for every i (what
    `match_gpus` then returns, in baseline order): every GPU on both sides has a serial, unique on its side
    (so no GPU shares its ids: its key carries no partition), and both sides list the same serials and
    partitions in the same order (the first tier, serial and partition, then pairs them all)."""
    if len(b_ids) != len(c_ids) or not b_ids:
        return False
    serials = [i.serial for i in b_ids]
    return (
        None not in serials
        and serials == [i.serial for i in c_ids]
        and len(set(serials)) == len(serials)
        and [i.partition for i in b_ids] == [i.partition for i in c_ids]
    )


def match_gpus(baseline: Sequence[Gpu], candidate: Sequence[Gpu]) -> tuple[GpuPair, ...]:
    """Pair baseline and candidate GPUs (see the module docstring); unmatched ones stand alone."""
    b_ids = identities(baseline)
    if type(candidate) is tuple and candidate == baseline:
        # the usual node: the same GPUs, field for field; identities are a function of the GPUs' fields,
        # so the candidate's are the baseline's (kept for the rules that ask for them next)
        _IDENTITIES.put(candidate, b_ids)
        c_ids = b_ids
    else:
        c_ids = identities(candidate)
    if _same_serials(b_ids, c_ids):  # the usual node: the same GPUs, one serial each, in the same order
        return tuple(
            GpuPair(key=GpuKey(kind=MatchKind.SERIAL, value=ident.serial), baseline=b, candidate=c)  # type: ignore[arg-type]
            for ident, b, c in zip(b_ids, baseline, candidate, strict=True)
        )
    return match_tiers(baseline, candidate)


def match_tiers(baseline: Sequence[Gpu], candidate: Sequence[Gpu]) -> tuple[GpuPair, ...]:
    """`match_gpus` tier by tier, without its shortcut for the usual node (the definition the tests hold
    the shortcut to)."""
    b_ids, c_ids = identities(baseline), identities(candidate)
    b_keys, c_keys = _keys(baseline, b_ids), _keys(candidate, c_ids)
    left = set(range(len(baseline)))
    right = set(range(len(candidate)))
    pairs: list[GpuPair] = []

    def _conflicting(bi: int, ci: int) -> bool:
        # Both sides carry the same kind of id and the ids differ: different devices.
        b, c = b_ids[bi], c_ids[ci]
        return (b.serial is not None and c.serial is not None and b.serial != c.serial) or (
            b.uid is not None and c.uid is not None and b.uid != c.uid
        )

    for tier, kind in _TIERS:
        by_key = {key: ci for ci, key in c_keys[tier].items() if ci in right}
        for bi in sorted(left):
            key = b_keys[tier].get(bi)
            ci = by_key.get(key) if key is not None else None
            if ci is None or ci not in right:
                continue
            if not kind.verified and _conflicting(bi, ci):
                continue
            pairs.append(GpuPair(key=b_ids[bi].key(baseline[bi], kind), baseline=baseline[bi], candidate=candidate[ci]))
            left.discard(bi)
            right.discard(ci)
            del by_key[key]
    # Index pairing: neither side has a usable id nor a BDF.
    c_blind = {candidate[ci].index: ci for ci in right if candidate[ci].bdf is None}
    for bi in sorted(left):
        if baseline[bi].bdf is not None:
            continue
        ci = c_blind.get(baseline[bi].index)
        if ci is not None and not _conflicting(bi, ci):
            del c_blind[baseline[bi].index]
            pairs.append(
                GpuPair(
                    key=GpuKey(kind=MatchKind.INDEX, value=str(baseline[bi].index)),
                    baseline=baseline[bi],
                    candidate=candidate[ci],
                )
            )
            left.discard(bi)
            right.discard(ci)
    taken = {p.key for p in pairs}
    for bi in sorted(left):
        key = best_key(baseline[bi], b_ids[bi], b_keys, bi)
        pairs.append(GpuPair(key=key, baseline=baseline[bi], candidate=None))
        taken.add(key)
    for ci in sorted(right):
        key = best_key(candidate[ci], c_ids[ci], c_keys, ci)
        if key in taken:  # same slot or same ids, different device: keep labels distinct
            key = replace(key, candidate_only=True)
        taken.add(key)
        pairs.append(GpuPair(key=key, baseline=None, candidate=candidate[ci]))
    return tuple(pairs)


def duplicate_ids(gpus: Sequence[Gpu]) -> list[tuple[str, str, tuple[Gpu, ...]]]:
    """(kind, id, GPUs) for every serial or unique id that more than one *device* prints.

    Partitions of one device legitimately share both ids: they sit on one PCI device (same domain,
    bus and device number) with distinct functions and the same pair of ids. Anything else sharing an
    id (two boards, or a partition set whose other id disagrees) is a corrupted or cloned identity.
    """
    ids = identities(gpus)
    out: list[tuple[str, str, tuple[Gpu, ...]]] = []
    for kind, attr in (("serial", "serial"), ("unique_id", "uid")):
        groups: dict[str, list[int]] = {}
        for pos, ident in enumerate(ids):
            value = getattr(ident, attr)
            if value is not None:
                groups.setdefault(value, []).append(pos)
        for value, members in sorted(groups.items()):
            if len(members) < 2:
                continue
            devices = {_slot(gpus[p]) for p in members}
            pairs = {(ids[p].serial, ids[p].uid) for p in members}
            parts = [ids[p].partition for p in members]
            one_device = len(devices) == 1 and None not in devices and len(pairs) == 1 and len(set(parts)) == len(parts)
            if not one_device:
                out.append((kind, value, tuple(sorted((gpus[p] for p in members), key=lambda g: g.index))))
    return out


def rocr_uuid(gpu: Gpu) -> str | None:
    """The `GPU-<hex>` UUID rocminfo prints and ROCR_VISIBLE_DEVICES accepts, from the unique id."""
    text = normalise_id(gpu.unique_id)
    if text is None:
        return None
    low = text.lower()
    if low.startswith("gpu-"):
        return "GPU-" + low[4:]
    uid = canonical_uid(text)
    if uid is None:
        return None
    return "GPU-" + (low.removeprefix("0x") if low.startswith("0x") else uid.removeprefix("0x"))
