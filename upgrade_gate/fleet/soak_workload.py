"""The soak watches the workload (issue 25, item 4): which observations run phase 6, and what they record.

A plan's `soak.workload_every` (a duration; copied into the window's record as `soak.workload_every_s`
at the PASS of `validate`, so a plan edited later does not change a soak in progress) makes soak
observations (`window observe`, by hand or from the soak CronJob) also run phase 6, the reference
training run, as a Job holding every GPU of the canary (`fleet.workload_jobs`). The 72 hours then watch
what the incident lost - throughput, collective timeouts, device initialisation - and not only the
configuration; the window page charts them beside the thermal gap.

Design decisions
- Cadence: an observation runs phase 6 when the soak has a cadence and no earlier observation of this
  soak ran it, or the last that did is at least `workload_every_s` before this one. So the first
  observation after the PASS always trains, and a cadence longer than the soak still gives one run.
  A duration, not "every Nth observation": the soak's own `every` may be stretched by cron (`--if-due`)
  and the watch should follow the clock.
- Which observations ran it is read from their metrics (`ran_workload`: the phase's throughput for a
  canary): a PASS observation that ran phase 6 has it for every canary, and one that could not run it
  blocked, which ends the soak (a blocked window is not observed). The record needs no second field
  that could disagree with the first.
- Fail closed: an observation that runs phase 6 requires it (`judge.observe.observation_policy`): a
  Job the node could not run, a workload that hangs, dies or prints no contract, no result at all (a
  `--snapshot` handed in without phase 6) is missing evidence that blocks, never a pass.
- What an observation records for the page (`workload_metrics`): the median samples/s of the run (as
  the judge reports it), the init time, and the collective timeouts in its log.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from upgrade_gate.codec import parse_date_time
from upgrade_gate.model import Snapshot, measurements_of

THROUGHPUT = "workload/samples_per_s"
WORKLOAD_METRICS = (THROUGHPUT, "workload/init_s", "workload/collective_timeouts")
"""The key metrics a workload observation records (median of the samples; timeouts: their sum)."""


def ran_workload(observation: Mapping[str, Any]) -> bool:
    """True when the observation recorded phase 6's throughput for a canary."""
    return any(THROUGHPUT in values for values in (observation.get("metrics") or {}).values())


def workload_due(soak: Mapping[str, Any], now: datetime, *, record: str = "window") -> bool:
    """Whether the observation at `now` runs phase 6 (the cadence in the module docstring)."""
    every = float(soak.get("workload_every_s") or 0.0)
    if every <= 0:
        return False
    observations = list(soak.get("observations") or ())
    last = next((i for i in range(len(observations) - 1, -1, -1) if ran_workload(observations[i])), None)
    if last is None:
        return True
    at = parse_date_time(observations[last]["at"], where=f"{record}: soak.observations[{last}].at")
    return now >= at + timedelta(seconds=every)


def workload_metrics(snapshot: Snapshot) -> dict[str, float]:
    """Phase 6's key values of a snapshot (empty when it has no phase 6 measurement)."""
    out: dict[str, float] = {}
    for m in measurements_of(snapshot):
        if m.key in WORKLOAD_METRICS and m.samples and m.key not in out:
            out[m.key] = float(sum(m.samples)) if m.unit == "count" else float(statistics.median(m.samples))
    return out
