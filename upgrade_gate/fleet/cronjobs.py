"""CronJobs that keep checking: a window's soak observations and the fleet watch between changes.

Both run `upgrade-gate` itself in the cluster, as the `upgrade-gate` service account (the rights of
deploy/rbac.yaml: they start capture Jobs and patch nodes), with the baseline store on a
PersistentVolumeClaim (default `upgrade-gate-store`, mounted at /var/lib/upgrade-gate/store).

Design decisions
- `window validate` creates `upgrade-gate-soak-<window>` on a PASS that starts a soak; `promote` and
  `rollback` delete it. The schedule comes from the soak's `every` when cron can say it exactly (a
  whole number of minutes dividing an hour, or of hours dividing a day); otherwise the CronJob runs
  hourly and `window observe --if-due` observes only once `every` has passed since the last one. The
  command always carries `--if-due`, so a CronJob that fires twice (controller restart, missed
  schedule catch-up) never takes an extra observation.
- `concurrencyPolicy: Forbid`: one observation at a time; a slow round is not stacked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from upgrade_gate.errors import ConfigError, InputError
from upgrade_gate.fleet.errors import KubeNotFoundError
from upgrade_gate.fleet.labels import MANAGED_BY, MANAGER
from upgrade_gate.fleet.manifests import JobSettings

if TYPE_CHECKING:
    from upgrade_gate.fleet.kube import KubeClient

STORE_CLAIM = "upgrade-gate-store"
STORE_PATH = "/var/lib/upgrade-gate/store"
CONTROLLER_ACCOUNT = "upgrade-gate"


def cron_schedule(every_s: float) -> str:
    """A cron schedule for an interval: exact where cron can say it, else hourly (`--if-due` decides).

    Cron cannot fire more often than once a minute: a shorter interval is refused (ConfigError, exit 3),
    never silently stretched to an hour (issue 28, item 9)."""
    if every_s < 60:
        raise ConfigError(
            f"every {every_s:g}s: a CronJob fires at most once a minute; use an interval of 60 s or more "
            "(a shorter cadence needs a process that loops, not a CronJob)"
        )
    minutes = int(every_s // 60)
    if every_s % 60 == 0 and 0 < minutes < 60 and 60 % minutes == 0:
        return f"*/{minutes} * * * *"
    hours = minutes // 60
    if every_s % 3600 == 0 and 0 < hours <= 24 and 24 % hours == 0:
        return "0 0 * * *" if hours == 24 else f"0 */{hours} * * *"
    return "0 * * * *"


def check_store_claim(client: KubeClient, namespace: str, claim: str = STORE_CLAIM) -> None:
    """Refuse (InputError, exit 3) a CronJob whose store claim does not exist or was lost: its pod would
    stay Pending with no word to anyone (issue 28, item 2). deploy/store.yaml ships the claim."""
    try:
        phase = client.claim_phase(claim, namespace)
    except KubeNotFoundError as exc:
        raise InputError(
            f"soak: persistentvolumeclaim {claim!r} does not exist in namespace {namespace!r}: the soak CronJob "
            "keeps its store there; create it (`kubectl apply -f deploy/store.yaml`) and validate again"
        ) from exc
    if phase == "Lost":
        raise InputError(f"soak: persistentvolumeclaim {claim!r} in namespace {namespace!r} is Lost (its volume "
                         "is gone); recreate it and validate again")  # fmt: skip


def soak_cronjob_name(window_id: str) -> str:
    """`upgrade-gate-soak-<window>` (window ids are DNS labels of at most 63; CronJob names 52)."""
    return f"upgrade-gate-soak-{window_id}"[:52].rstrip("-.")


def _cronjob(
    name: str, purpose: str, schedule: str, argv: Sequence[str], settings: JobSettings, store_claim: str
) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": "upgrade-gate", MANAGED_BY: MANAGER, "upgrade-gate/purpose": purpose}
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, "namespace": settings.namespace, "labels": labels},
        "spec": {
            "schedule": schedule,
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": labels},
                "spec": {
                    "backoffLimit": 0,
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "serviceAccountName": CONTROLLER_ACCOUNT,
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": purpose,
                                    "image": settings.image,
                                    "imagePullPolicy": settings.image_pull_policy,
                                    "command": list(argv),
                                    "env": [{"name": "UPGRADE_GATE_STORE", "value": STORE_PATH}],
                                    "volumeMounts": [{"name": "store", "mountPath": STORE_PATH}],
                                }
                            ],
                            "volumes": [{"name": "store", "persistentVolumeClaim": {"claimName": store_claim}}],
                        },
                    },
                },
            },
        },
    }


def soak_cronjob(
    window_id: str,
    every_s: float,
    settings: JobSettings,
    *,
    command: Sequence[str],
    store_claim: str = STORE_CLAIM,
    workload_image: str = "",
) -> dict[str, Any]:
    """The CronJob that runs `window observe --if-due` for a soaking window.

    `workload_image`: the image `window validate --workload-image` gave the workload Jobs, passed on to
    the observations that run phase 6 (`fleet.soak_workload`); empty: the ConfigMap's
    `UPGRADE_GATE_WORKLOAD_IMAGE`, else the default, as at validate."""
    argv = [*command, "window", "observe", "--id", window_id, "--if-due", "--store", STORE_PATH]
    if workload_image:
        argv += ["--workload-image", workload_image]
    return _cronjob(soak_cronjob_name(window_id), "soak", cron_schedule(every_s), argv, settings, store_claim)


def watch_cronjob(
    every_s: float, settings: JobSettings, *, command: Sequence[str], store_claim: str = STORE_CLAIM
) -> dict[str, Any]:
    """The CronJob that runs `fleet watch` between change windows."""
    argv = [*command, "fleet", "watch", "--store", STORE_PATH]
    return _cronjob("upgrade-gate-watch", "watch", cron_schedule(every_s), argv, settings, store_claim)
