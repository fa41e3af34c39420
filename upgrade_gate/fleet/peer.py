"""The peer of a one-canary window (issue 28): a known-good partner held only while phases 4-5 run.

Phases 4 (rail bandwidth) and 5 (cluster RCCL) pair nodes, so a window whose plan chose one canary
could never pass ("no peer"). `window plan` then also chooses a peer (`fleet.canary.select_peer`: same
class, idle, Ready, not cordoned by anyone, not a canary, still on the old version) and records it;
`window validate` holds it only around phases 4-5:
- hold (at the start of phase 4, through the pipeline's progress events): re-checked (still eligible,
  still idle), then annotations `upgrade-gate/peer-of=<window id>` and `upgrade-gate/cordoned-by=<window
  id>` first (a crash after the cordon still says whose it is), cordon, taint
  `upgrade-gate/canary=<change>:NoSchedule` (the taint the phase Jobs and MPIJob workers tolerate);
- release (when phase 5 is done, or whatever ended the run early; `promote` and `rollback` release a
  hold a crash left behind): taint, cordon (only if ours) and both annotations go.
The peer never gets a label: its measurements pair with the canary's but are not reported (the
pipeline's `peers`), so no CVF label and no `upgrade-gate/canary` describe it. Each hold and release is
an event in the window's history.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from upgrade_gate.fleet.canary import ineligible_reason
from upgrade_gate.fleet.errors import KubeNotFoundError
from upgrade_gate.fleet.labels import CANARY, CORDONED_BY, PEER_OF
from upgrade_gate.fleet.objects import Taint
from upgrade_gate.fleet.window_state import WindowStateError
from upgrade_gate.model import NodeName

if TYPE_CHECKING:
    from upgrade_gate.fleet.kube import KubeClient
    from upgrade_gate.validate.pipeline import Progress, ProgressEvent

FIRST_PAIRED_PHASE, LAST_PAIRED_PHASE = 4, 5


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def hold_peer(client: KubeClient, window_id: str, peer: NodeName, change: str) -> str:
    """Cordon and taint the peer for this window (re-checked first); the audit note. WindowStateError
    (exit 3, plan again) when it is gone, busy, or no longer a possible peer."""
    try:
        node = client.get_node(peer)
    except KubeNotFoundError as exc:
        raise WindowStateError(f"window {window_id}: peer {peer} no longer exists; plan again") from exc
    ours = node.annotations.get(PEER_OF) == window_id
    why = None if ours else ineligible_reason(node)
    pods = client.gpu_pods_on_node(peer)
    if why is None and pods:
        why = f"busy: {', '.join(pods)}"
    if why is not None:
        raise WindowStateError(f"window {window_id}: peer {peer} cannot be held for phases 4-5 ({why}); plan again")
    client.patch_node_metadata(peer, annotations={PEER_OF: window_id, CORDONED_BY: window_id})
    client.cordon(peer)
    client.add_taint(peer, Taint(key=CANARY, value=change, effect="NoSchedule"))
    return f"peer {peer} cordoned and tainted for phases 4-5"


def release_peer(client: KubeClient, window_id: str, peer: NodeName) -> str | None:
    """Undo `hold_peer` if this window holds the peer; the audit note, or None when there was nothing to undo."""
    try:
        node = client.get_node(peer)
    except KubeNotFoundError:
        return None
    if node.annotations.get(PEER_OF) != window_id:
        return None
    client.remove_taint(peer, CANARY)
    if node.annotations.get(CORDONED_BY) == window_id:
        client.uncordon(peer)
    client.patch_node_metadata(peer, annotations={PEER_OF: None, CORDONED_BY: None})
    return f"peer {peer} released (taint and cordon removed)"


class PeerHold:
    """The pipeline's progress hook that holds the peer from the start of phase 4 to the end of phase 5;
    `close()` releases it whatever ended the run. `events` is the audit: (action, time, note)."""

    def __init__(self, client: KubeClient, window_id: str, peer: NodeName, change: str) -> None:
        self._client, self._wid, self._peer, self._change = client, window_id, peer, change
        self.held = False
        self.events: list[tuple[str, str, str]] = []

    def wrap(self, progress: Progress | None) -> Progress:
        """`progress`, with the hold and release around the paired phases."""

        def hook(ev: ProgressEvent) -> None:
            if ev.kind == "phase-start" and ev.phase > LAST_PAIRED_PHASE:
                self.close()  # the workload phases (6-7) run on the canary alone: no peer held for them
            if ev.kind == "phase-start" and FIRST_PAIRED_PHASE <= ev.phase <= LAST_PAIRED_PHASE and not self.held:
                self.events.append(("hold-peer", _now(), hold_peer(self._client, self._wid, self._peer, self._change)))
                self.held = True
            if progress is not None:
                progress(ev)
            if ev.kind == "phase-done" and ev.phase >= LAST_PAIRED_PHASE:
                self.close()

        return hook

    def close(self) -> None:
        """Release the peer if held (idempotent)."""
        if not self.held:
            return
        self.held = False
        note = release_peer(self._client, self._wid, self._peer)
        if note is not None:
            self.events.append(("release-peer", _now(), note))


def release_leftover(client: KubeClient, window_id: str, peer: NodeName | None, log: Callable[[str], None]) -> None:
    """Release a hold a crashed validate left (promote, rollback): `log` gets the audit note."""
    if peer is None:
        return
    note = release_peer(client, window_id, peer)
    if note is not None:
        log(note)
