"""The change window's record in the baseline store: `windows/<id>.json`, its states and transitions.

Design decisions
- The record lives in the baseline store (one commit per write, schema `window`), not in the cluster
  and not in the operator's memory, so a crashed operator (or another one) picks the window up where
  it stood: `window status` reads it, and every command re-reads it before acting.
- The record is plain JSON (a dict checked by `schemas/window.schema.json` on every read and write);
  `WindowRecord` is a thin typed view over it for the fields the commands decide on.
- States and the commands that move them:

      planned --start--> started --validate--> validated (PASS, no soak) --promote--> promoted
                            |               \\-> soaking (PASS, the plan's soak) --observe (PASS)--> soaking
                            |               |        |--observe (BLOCK)--> blocked
                            |               |        \\--promote (soak elapsed, >= 2 observations, all PASS;
                            |               |                    or --skip-soak --reason)--> promoted
                            |               \\-> blocked (BLOCK)
                            |  validate may run again from validated / blocked (e.g. after a fix)
                            \\--rollback (from started, validated, soaking or blocked)--> rolled-back
      promoted --expand (next wave of each class, under the class-wide cap)--> started (the same cycle)

  `start` may be repeated in `started` (it is idempotent on the nodes), `promote` in `promoted` is
  refused, and every refusal names the window, its state and what is allowed. `expand` with every
  node of the window's classes changed says the rollout is complete.
- Candidate snapshots of a validation are kept beside the record (`windows/<id>/<node>.json`) so
  `promote` saves exactly what was judged, even from another machine.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from upgrade_gate.errors import ExitCode, GateError, InputError, NotFoundError
from upgrade_gate.model import NodeName, Snapshot
from upgrade_gate.snapshot.io import dumps_snapshot, loads_snapshot

if TYPE_CHECKING:
    from upgrade_gate.store.gitstore import BaselineStore

SCHEMA = "window"
SCHEMA_VERSION = "1"
FOLDER = "windows"


class State(StrEnum):
    """Where a change window stands (also the value of the `upgrade-gate/window-state` label)."""

    PLANNED = "planned"
    STARTED = "started"
    VALIDATED = "validated"
    SOAKING = "soaking"
    BLOCKED = "blocked"
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled-back"


ALLOWED: Mapping[str, frozenset[State]] = {
    "start": frozenset({State.PLANNED, State.STARTED}),
    "validate": frozenset({State.STARTED, State.VALIDATED, State.BLOCKED}),
    "promote": frozenset({State.VALIDATED, State.SOAKING}),
    "observe": frozenset({State.SOAKING}),
    "expand": frozenset({State.PROMOTED}),
    "rollback": frozenset({State.STARTED, State.VALIDATED, State.SOAKING, State.BLOCKED}),
    "plan": frozenset({State.PLANNED}),  # re-planning a window that has not started
}


class WindowStateError(InputError):
    """The command does not apply to the window in its current state (exit 3)."""


class WindowBlockedError(GateError):
    """`promote` on a window whose validation blocked: the gate said no (exit 1)."""

    exit_code = ExitCode.BLOCK


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowRecord:
    """A typed view over one window document."""

    doc: dict[str, Any]

    @property
    def id(self) -> str:
        """The window id."""
        return str(self.doc["id"])

    @property
    def state(self) -> State:
        """The current state."""
        return State(self.doc["state"])

    @property
    def canaries(self) -> tuple[NodeName, ...]:
        """The canary nodes, in order."""
        return tuple(NodeName(c["node"]) for c in self.doc["canaries"])

    def check(self, action: str) -> None:
        """Raise when `action` is not allowed in the current state."""
        allowed = ALLOWED[action]
        if self.state in allowed:
            return
        if action == "promote" and self.state is State.BLOCKED:
            raise WindowBlockedError(
                f"window {self.id}: validation BLOCKED; promote only follows a PASS "
                "(see `upgrade-gate window status`, then `window rollback --reason ...`)"
            )
        shown = ", ".join(sorted(allowed))
        raise WindowStateError(f"window {self.id} is {self.state}; `window {action}` needs state {shown}")


def document_name(window_id: str) -> str:
    """`windows/<id>.json`."""
    return f"{FOLDER}/{window_id}.json"


def candidate_name(window_id: str, node: str) -> str:
    """`windows/<id>/<node>.json`: a candidate snapshot judged by the window's validation."""
    return f"{FOLDER}/{window_id}/{node}.json"


def load_window(store: BaselineStore, window_id: str) -> WindowRecord:
    """The window's record; NotFoundError naming the window and the store."""
    try:
        doc = store.read_document(document_name(window_id), schema=SCHEMA)
    except NotFoundError:
        raise NotFoundError(
            f"{store.path}: no change window {window_id!r} (see `upgrade-gate window status`)"
        ) from None
    return WindowRecord(doc=doc)


def find_window(store: BaselineStore, window_id: str) -> WindowRecord | None:
    """The window's record, or None when there is none."""
    try:
        return load_window(store, window_id)
    except NotFoundError:
        return None


def save_window(store: BaselineStore, doc: Mapping[str, Any], message: str) -> WindowRecord:
    """Write the record (schema-checked) as one commit."""
    data = json.loads(json.dumps(doc))
    store.write_document(document_name(str(doc["id"])), data, message, schema=SCHEMA)
    return WindowRecord(doc=data)


def list_windows(store: BaselineStore) -> tuple[WindowRecord, ...]:
    """Every window record in the store, by id."""
    names = store.documents(FOLDER)
    return tuple(WindowRecord(doc=store.read_document(n, schema=SCHEMA)) for n in names)


def event(doc: dict[str, Any], *, action: str, by: str, at: str, note: str | None = None) -> None:
    """Append a history entry (who did what, when) and move `state` to the doc's current state."""
    entry: dict[str, Any] = {"action": action, "by": by, "at": at, "state": doc["state"]}
    if note:
        entry["note"] = note
    doc.setdefault("history", []).append(entry)


def save_candidate(store: BaselineStore, window_id: str, snapshot: Snapshot) -> None:
    """Keep a judged candidate snapshot beside the window record."""
    data = json.loads(dumps_snapshot(snapshot))
    store.write_document(
        candidate_name(window_id, snapshot.node.name), data, f"window {window_id}: candidate {snapshot.node.name}",
        schema="snapshot",
    )  # fmt: skip


def load_candidate(store: BaselineStore, window_id: str, node: str) -> Snapshot:
    """A candidate snapshot kept by `save_candidate`; InputError when the file holds another node.

    The file's name is what `promote` saves it as: a hand commit (or a pulled remote) that put node-b's
    snapshot under `node-a.json` would otherwise store it as node-b's baseline, leaving node-a's as it
    was. Checked as the store's `load` checks `nodes/<node>.json`.
    """
    name = candidate_name(window_id, node)
    source = f"{store.path}/{name}"
    data = store.read_document(name)
    snap = loads_snapshot(json.dumps(data), source=source)
    if snap.node.name != node:
        raise InputError(f"{source}: holds node {snap.node.name!r}, expected {node!r}")
    return snap
