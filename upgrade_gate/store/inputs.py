"""What the judge reads from the baseline store: baselines, class references and the denylist.

One loader, `load_judge_inputs(store, ref, candidates)`, for `gate` (its in-memory path, with
checklists), `window validate` and the demo; `gate`'s streaming path uses the same pieces
(`saved_references`, `aggregate_references`, `current_denylist`) one node at a time. The rules, once:

- Everything is read at one commit: `ref` (a tag, branch or commit; None: HEAD) is pinned first, so a
  save landing meanwhile cannot mix two baselines into one verdict.
- Baselines: those of the candidates' nodes and of `nodes` (a plan's canaries without a candidate, a
  window's canaries) that the store has at that commit.
- Class references: for the class of each candidate (its own `node_class`, else its baseline's), the
  store's `classes/<class>.json` at that commit; a class without one is aggregated from the store's
  baselines of that class at that commit.
- The denylist is read at HEAD whatever `ref` says: baselines are history, the denylist is today's
  verdict on hardware (a GPU denied after the reference tag was cut must block now).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from upgrade_gate.errors import InputError
from upgrade_gate.model import ClassReference, GpuSerial, NodeName, Snapshot

if TYPE_CHECKING:
    from upgrade_gate.store.gitstore import BaselineStore


@dataclass(frozen=True, slots=True, kw_only=True)
class JudgeInputs:
    """The store's side of a judgement, read at one commit (`pin`)."""

    pin: str
    baselines: Mapping[NodeName, Snapshot]
    references: Mapping[str, ClassReference]
    denylist: Mapping[GpuSerial, str]


def load_judge_inputs(
    store: BaselineStore,
    ref: str | None,
    candidates: Sequence[Snapshot],
    *,
    nodes: Iterable[NodeName] = (),
) -> JudgeInputs:
    """Baselines, class references and denylist for judging `candidates` (see the module docstring)."""
    pin = store.pin(ref)
    stored = set(store.nodes(pin))
    names = sorted({s.node.name for s in candidates} | set(nodes))
    baselines = {n: store.load(n, pin) for n in names if n in stored}
    classes = {
        cls for s in candidates if (cls := s.node.node_class or _class_of(baselines.get(s.node.name))) is not None
    }
    saved = saved_references(store, pin)
    references = {c: saved[c] for c in classes if c in saved}
    references.update(aggregate_references(store, pin, classes - set(saved)))
    return JudgeInputs(pin=pin, baselines=baselines, references=references, denylist=current_denylist(store))


def saved_references(store: BaselineStore, pin: str) -> dict[str, ClassReference]:
    """Every class reference kept in the store (`classes/<class>.json`) at the pinned commit.

    Read like baselines (`load_trusted_document`): `baseline save` and `baseline aggregate --save`
    validated them against the class-reference schema when they wrote them, and git's object id
    says the bytes are those. A file whose class is not its name (`classes/zz-old.json` holding
    `mi300x`, committed by hand) is InputError naming it: read, it would replace (or shadow) the
    class's own reference depending on the order of the names.
    """
    out = {}
    for name in store.documents("classes", pin):
        ref = store.load_trusted_document(ClassReference, name, pin)
        expected = name.removeprefix("classes/").removesuffix(".json")
        if ref.node_class != expected:  # the writers name the file `classes/<class>.json`
            raise InputError(f"{store.path}/{name}@{pin[:12]}: holds class {ref.node_class!r}, expected {expected!r}")
        out[ref.node_class] = ref
    return out


def aggregate_references(store: BaselineStore, pin: str, classes: Iterable[str]) -> dict[str, ClassReference]:
    """Class references of `classes` from the store's baselines at `pin`, streamed (one at a time)."""
    from upgrade_gate.store.aggregate import ClassAccumulator

    wanted = set(classes)
    if not wanted:
        return {}
    accs: dict[str, ClassAccumulator] = {}
    for node in store.nodes(pin):
        snap = store.load_trusted(node, pin)
        cls = snap.node.node_class
        if cls in wanted:
            accs.setdefault(cls, ClassAccumulator(cls)).add(snap)
    return {cls: acc.result() for cls, acc in accs.items()}


def current_denylist(store: BaselineStore) -> dict[GpuSerial, str]:
    """The denylist at HEAD (never at a ref: see the module docstring), serial -> reason."""
    return {serial: entry.reason for serial, entry in store.denylist(None).items()}


def _class_of(snap: Snapshot | None) -> str | None:
    return snap.node.node_class if snap is not None else None
