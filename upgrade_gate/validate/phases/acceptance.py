"""Phase 1, GPU hardware acceptance: the configured RVS / AGFHC recipes, in order, first failure stops.

The recipes are CVF's `GPU_VALIDATION_STAGES_JSON` stages (default: RVS gst_single, AGFHC xgmi_lvl1,
pcie_lvl1, hbm_lvl1). Each stage runs `Iterations` times with `TimeoutSeconds` per run:
- RVS: `rvs -c CONF -j`, CONF = `<UPGRADE_GATE_RVS_CONF_DIR>/<recipe>.conf` unless the recipe is a path;
- AGFHC: `agfhc -r RECIPE`.
A run passes only when the tool exited 0 AND its parsed output passes (every RVS action / AGFHC test has
an explicit passing verdict); the first failing stage is the reason (`stage-<name>: ...`, like CVF's
`stage-<name>:<reason>` annotation), and later stages are not run (CVF's stop-on-first-failure).

Design decisions:
- A stage with `Skip: true` is not run and annotated `stage-<name>=skipped`; when every stage is skipped
  (or none is configured) the phase is `skipped`, exactly as CVF sets the aggregate label to `skipped`,
  which does not let the node into phase 2 (pipeline gating).
- A missing tool, a timeout, or output no parser reads is an `error` naming the tool; a non-zero exit
  with readable output is a `failed` with the failing test named.
- `Arguments` are test-runner arguments in CVF (e.g. `--parallel`), not RVS/AGFHC flags; they are shown
  in the plan but not passed to the tools.
- A GPU without a result fails the stage, named by BDF. RVS >= 1.3's summary lists the GPUs it ran on
  (`parse.rvs`: the list is what HIP showed RVS, so a GPU HIP does not see, or one RVS could not map to
  a KFD node, is silently left out of it and of every action). Each GPU of the node's snapshot must be
  in that list; a summary that lists no GPU at all fails too, snapshot or not. An RVS run without a
  summary (RVS < 1.3, the fake node's RVS 1.1 gst log) prints no GPU list, but every verdict line names
  its GPU by RVS's id (`[GPU:: 55354] ... met: TRUE`, the KFD gpu_id): each action must have verdicts
  for as many distinct GPUs as the snapshot has GPUs (the snapshot does not record the KFD id, so the
  ids are counted, not matched). An action with no GPU-named verdict, or one whose configuration named
  a subset of the GPUs, fails: nothing shows that the other GPUs were tested.
- AGFHC prints how many GPUs it saw in its header (`GPUs: 8`): that count must be the node's (the
  snapshot's GPU entries, or its physical devices when partitioned: no capture shows what AGFHC
  counts in CPX mode, so either is taken); a run that printed no count is an `error`. A recipe with
  skipped or unexecuted tests fails (`parse.rvs` `AgfhcResult.not_run`): it did not accept the node.

Dated notes:
- 2025: RVS `-j` writes a JSON log file (to /var/tmp or the path given) and keeps the text on stdout
  (rocm.docs.amd.com ROCmValidationSuite cli.html, latest); the text is what `parse_rvs` reads, the JSON
  log is not read (no real capture of its format, corpus INDEX gaps).
"""

from __future__ import annotations

import re

from upgrade_gate.collect.runner import CommandResult
from upgrade_gate.errors import ParseError
from upgrade_gate.model import PhaseResult, PhaseStatus, Snapshot
from upgrade_gate.parse.bdf import address_of
from upgrade_gate.parse.rvs import AgfhcResult, RvsResult, parse_agfhc, parse_rvs
from upgrade_gate.validate import cvf
from upgrade_gate.validate.config import CvfConfig, Stage
from upgrade_gate.validate.phase import Outcome, PhaseContext, make_result


def stage_argv(stage: Stage, config: CvfConfig) -> tuple[str, ...]:
    """The command line of one stage."""
    if stage.framework == "AGFHC":
        return ("agfhc", "-r", stage.recipe)
    recipe = stage.recipe
    conf = recipe if "/" in recipe or recipe.endswith(".conf") else f"{config.rvs_conf_dir.rstrip('/')}/{recipe}.conf"
    return ("rvs", "-c", conf, "-j")


def _judge_run(stage: Stage, result: CommandResult, out: Outcome, snapshot: Snapshot | None = None) -> bool:
    """Record why one run of a stage did not pass; True when it passed."""
    where = f"stage-{stage.name}"
    if result.missing or result.timed_out:
        out.error(f"{where}: {result.failure_reason()}")
        return False
    tool = result.argv[0]
    try:
        parsed = parse_agfhc(result.stdout) if stage.framework == "AGFHC" else parse_rvs(result.stdout)
    except ParseError as exc:
        if result.returncode != 0:
            out.fail(f"{where}: {result.failure_reason()}")
        else:
            out.error(f"{where}: {tool}: unreadable output: {exc}")
        return False
    if isinstance(parsed, AgfhcResult) and not parsed.passed and parsed.first_failure == parsed.not_run:
        out.fail(f"{where}: {tool} {stage.recipe}: {parsed.not_run}: a skipped acceptance test is not a pass")
        return False
    if not parsed.passed:
        on = _failing_gpus(parsed) if isinstance(parsed, RvsResult) else ""
        out.fail(f"{where}: {tool} {stage.recipe}: {parsed.first_failure or 'no passing verdict'} failed{on}")
        return False
    if isinstance(parsed, AgfhcResult):
        if parsed.gpus is None:
            unknown = "AGFHC printed no GPU count ('GPUs: N'): which GPUs were tested is unknown"
            out.error(f"{where}: {tool} {stage.recipe}: {unknown}")
            return False
        untested = _agfhc_untested(parsed.gpus, snapshot)
    else:
        untested = _untested_gpus(parsed, snapshot)
    if untested is not None:
        out.fail(f"{where}: {tool} {stage.recipe}: {untested}")
        return False
    if result.returncode != 0:
        out.fail(f"{where}: {result.failure_reason()} although every test passed")
        return False
    return True


def _agfhc_untested(tested: int, snapshot: Snapshot | None) -> str | None:
    """Why AGFHC's GPU count is not the node's; None when it is (or there is no snapshot to hold it against)."""
    if snapshot is None or not snapshot.gpus:
        return None
    logical = len(snapshot.gpus)
    slots = {a.slot for a in (address_of(g.bdf) for g in snapshot.gpus) if a is not None}
    devices = len(slots) if len(slots) < logical and all(g.bdf is not None for g in snapshot.gpus) else None
    if tested in (logical, devices):
        return None
    shown = f"{logical} ({devices} devices)" if devices is not None else str(logical)
    return (
        f"AGFHC tested {tested} GPU(s) ('GPUs: {tested}'), the node has {shown}: "
        "a GPU AGFHC does not see is never tested"
    )


_RVS_GPU = re.compile(r"\[GPU::\s*(?P<id>\d+)\s*\]")
_VERDICT = re.compile(r"\b(?:met|pass)\s*:\s*(?:TRUE|FALSE)\b", re.IGNORECASE)


def _legacy_untested(parsed: RvsResult, snapshot: Snapshot | None) -> str | None:
    """Why an action of an RVS log without a summary has no verdict for some GPU of the node; None if none."""
    if snapshot is None or not snapshot.gpus:
        return None
    want = len(snapshot.gpus)
    for action in parsed.actions:
        ids: list[str] = []
        for line in action.details:
            match = _RVS_GPU.search(line)
            if match is not None and _VERDICT.search(line) is not None and match["id"] not in ids:
                ids.append(match["id"])
        if len(ids) < want:
            named = f" (RVS id {', '.join(ids)})" if ids else ""
            return (
                f"action {action.name} has a verdict for {len(ids)} GPU{'' if len(ids) == 1 else 's'}{named}, "
                f"the node has {want}: a GPU without a verdict was not tested"
            )
    return None


def _untested_gpus(parsed: RvsResult, snapshot: Snapshot | None) -> str | None:
    """Why a GPU of the node has no result in an RVS run; None if each has (module docstring)."""
    if not parsed.summary:
        return _legacy_untested(parsed, snapshot)  # RVS < 1.3: the verdicts' GPU ids, counted
    if not parsed.gpus:
        return "no GPU has a result: the RVS summary lists no GPU ('No GPUs detected !')"
    if snapshot is None or not snapshot.gpus:
        return None
    tested = {g.bdf for g in parsed.gpus}
    missing = sorted({g.bdf for g in snapshot.gpus if g.bdf is not None} - tested)
    if missing:
        return (
            f"no result for GPU {', '.join(missing)}: the RVS summary lists {len(tested)} GPU(s), "
            f"not the node's {len({g.bdf for g in snapshot.gpus})} (a GPU HIP does not show RVS is never tested)"
        )
    if any(g.bdf is None for g in snapshot.gpus) and len(parsed.gpus) < len(snapshot.gpus):
        return f"the RVS summary lists {len(parsed.gpus)} GPU(s), the node has {len(snapshot.gpus)}"
    return None


def _failing_gpus(parsed: RvsResult) -> str:
    """` on GPU id 48932, 20068`: the GPUs whose verdict lines in the first failing action say FALSE, by
    the id RVS prints (the KFD gpu_id, which `amd-smi list` shows as KFD_ID beside the BDF); "" if none."""
    action = next((a for a in parsed.actions if a.passed is not True), None)
    if action is None:
        return ""
    ids: list[str] = []
    for line in action.details:
        match = _RVS_GPU.search(line)
        failed = re.search(r"\b(?:met|pass)\s*:\s*FALSE\b", line, re.IGNORECASE)
        if match is not None and failed is not None and match["id"] not in ids:
            ids.append(match["id"])
    return f" on GPU id {', '.join(ids)} (RVS's id: amd-smi list shows it as KFD_ID beside the BDF)" if ids else ""


class AcceptancePhase:
    """Phase 1."""

    number = 1
    name = cvf.PHASE_NAMES[1]
    label_key: str | None = cvf.GPU_HW_ACCEPTANCE

    def run(self, ctx: PhaseContext) -> PhaseResult:
        """Run every configured stage until the first failure."""
        out = Outcome()
        stages_state: dict[str, str] = {}
        active = [s for s in ctx.config.stages if not s.skip]
        for stage in ctx.config.stages:
            if stage.skip:
                stages_state[f"stage-{stage.name}"] = "skipped"
        if not active:
            why = "every phase-1 stage is skipped" if ctx.config.stages else "no phase-1 stages configured"
            return make_result(self, ctx.config, PhaseStatus.SKIPPED, (why,), extra=stages_state)
        runner = ctx.runner()
        for stage in active:
            argv = stage_argv(stage, ctx.config)
            passed = all(
                _judge_run(stage, runner.run(argv, timeout=stage.timeout_s), out, ctx.snapshot)
                for _ in range(stage.iterations)
            )
            stages_state[f"stage-{stage.name}"] = "passed" if passed else "failed"
            if not passed:
                break
        return out.result(self, ctx.config, extra=stages_state)

    def budget_s(self, config: CvfConfig, *, samples: int, nodes: int) -> float:
        """Every stage's timeout times its iterations, plus CVF's 120 s slack per stage."""
        return sum((s.timeout_s + 120.0) * s.iterations for s in config.stages if not s.skip) or 30.0

    def plan(self, config: CvfConfig, *, samples: int) -> tuple[str, ...]:
        """Dry-run description."""
        lines = []
        for stage in config.stages:
            if stage.skip:
                lines.append(f"stage {stage.name}: skipped (Skip: true)")
                continue
            extra = f" (test-runner arguments not passed: {stage.arguments})" if stage.arguments else ""
            lines.append(
                f"stage {stage.name}: {' '.join(stage_argv(stage, config))} x{stage.iterations}, "
                f"timeout {stage.timeout_s:g}s{extra}"
            )
        return tuple(lines) or ("no stages configured: phase 1 is skipped",)
