"""Issue 28, items 2 and 9: the soak's store claim ships with deploy/, a soak that cannot run is refused
before the phases (exit 3 naming what is missing), and a sub-minute cadence is never stretched to an hour.

On the double with the 16-node cluster of tests/test_fleet_window.py (the double creates deploy/store.yaml's
claim at start, as a cluster set up from deploy/ has it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.k8s.store import RESOURCES
from tests.test_fleet_window import JOB_OPTS, PLAN, WINDOW, Env, baseline, env
from upgrade_gate.cli.main import run
from upgrade_gate.errors import ConfigError
from upgrade_gate.fleet.cronjobs import cron_schedule

__all__ = ["baseline", "env"]  # the fixtures, shared with tests/test_fleet_window.py

pytest_plugins = ["tests.k8s.fixtures"]  # kube_cluster


@pytest.mark.parametrize("every_s", [0.5, 30.0, 59.0])
def test_cron_schedule_refuses_sub_minute_cadences(every_s: float) -> None:
    """`cron_schedule(30)` used to return `0 * * * *` (hourly) without a word."""
    with pytest.raises(ConfigError, match="at most once a minute") as info:
        cron_schedule(every_s)
    assert info.value.exit_code == 3


def test_cron_schedule_exact_and_hourly_cadences() -> None:
    assert cron_schedule(60) == "*/1 * * * *"
    assert cron_schedule(6 * 3600) == "0 */6 * * *"
    assert cron_schedule(7 * 60) == "0 * * * *"  # cron cannot say it: hourly, and --if-due decides


def _started(env: Env, plan: Path) -> list[str]:
    st = ["--store", str(env.store)]
    assert env.cli("window", "plan", "--plan", str(plan), *st) == 0
    assert env.cli("window", "start", "--id", WINDOW, *st) == 0
    return st


def test_soak_without_its_store_claim_is_refused_before_the_phases(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    """No `upgrade-gate-store` claim: `window validate` exits 3 naming it and runs no Job; the window stays
    `started`, and once the claim exists the same command proceeds."""
    st = _started(env, PLAN)
    env.cluster.api.store.delete(RESOURCES[("", "persistentvolumeclaims")], "upgrade-gate", "upgrade-gate-store")
    capsys.readouterr()
    assert env.cli("window", "validate", "--id", WINDOW, *st, *JOB_OPTS) == 3
    err = capsys.readouterr().err
    assert "persistentvolumeclaim 'upgrade-gate-store' does not exist in namespace 'upgrade-gate'" in err, err
    assert "deploy/store.yaml" in err
    assert env.cluster.api.seen("create", "jobs") == []
    assert run(["window", "status", "--id", WINDOW, *st]) == 0
    assert f"window {WINDOW}: started" in capsys.readouterr().out


def test_soak_every_30s_is_refused_before_the_phases(
    env: Env, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A plan whose soak is observed every 30 s cannot be a CronJob: exit 3 at validate, before any Job."""
    plan = tmp_path / "plan.yaml"
    text = PLAN.read_text(encoding="utf-8")
    assert "every: 6h" in text
    plan.write_text(text.replace("every: 6h", "every: 30s"), encoding="utf-8")
    st = _started(env, plan)
    capsys.readouterr()
    assert env.cli("window", "validate", "--id", WINDOW, *st, *JOB_OPTS) == 3
    assert "every 30s: a CronJob fires at most once a minute" in capsys.readouterr().err
    assert env.cluster.api.seen("create", "jobs") == []
