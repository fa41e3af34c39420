"""Object-status helpers shared by the simulated controllers: owner references, conditions, pod phases."""

from __future__ import annotations

from typing import Any

from tests.k8s.store import Obj, now_rfc3339


def owner_ref(obj: Obj, kind: str) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": kind,
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned_by(obj: Obj, uid: str) -> bool:
    return any(r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or ())


def condition(type_: str, reason: str, message: str) -> dict[str, str]:
    now = now_rfc3339()
    return {
        "type": type_,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }


def terminal(status: Obj, *types: str) -> bool:
    return any(c.get("type") in types and c.get("status") == "True" for c in status.get("conditions") or ())


def merge_status(new: Obj) -> Any:
    def fn(obj: Obj) -> None:
        obj["status"] = {**obj.get("status", {}), **new}

    return fn


def bind(node: str) -> Any:
    def fn(pod: Obj) -> None:
        pod["spec"]["nodeName"] = node
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()}]

    return fn


def unschedulable(message: str) -> Any:
    def fn(pod: Obj) -> None:
        pod["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        ]

    return fn


def running(node: str) -> Any:
    def fn(pod: Obj) -> None:
        now = now_rfc3339()
        c = pod["spec"]["containers"][0]
        pod["status"].update(
            phase="Running",
            hostIP="10.0.0.1",
            podIP="10.244.0.10",
            startTime=now,
            conditions=[
                {"type": t, "status": "True", "lastTransitionTime": now}
                for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ],
            containerStatuses=[
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                }
            ],
        )

    return fn


def terminated(phase: str, code: int | None, reason: str, message: str) -> Any:
    def fn(pod: Obj) -> None:
        now = now_rfc3339()
        pod["status"]["phase"] = phase
        if code is None:
            pod["status"]["conditions"] = [
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": now,
                }
            ]
            pod["status"]["reason"], pod["status"]["message"] = reason, message
            return
        for cs in pod["status"].get("containerStatuses") or []:
            cs.update(
                ready=False,
                started=False,
                state={
                    "terminated": {
                        "exitCode": code,
                        "reason": reason,
                        "message": message or None,
                        "startedAt": pod["status"].get("startTime", now),
                        "finishedAt": now,
                    }
                },
            )
            if not message:
                cs["state"]["terminated"].pop("message")

    return fn
