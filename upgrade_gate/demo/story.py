"""The demo story, step by step: a ROCm 6.1.3 -> 6.2.0 change gated on an 8-node MI300X fleet.

`run_demo(workdir, healthy=..., say=...)` plays the whole story offline and returns a `DemoOutcome`;
`say` receives the narration one line at a time (the CLI prints it). The steps:
1. the fleet: eight fake MI300X nodes running ROCm 6.1.3;
2. before the change: capture -> snapshot -> CVF phases 0-3 on every node, saved to a fresh git baseline
   store tagged `rocm-6.1.3` (phase 2 gives each baseline its bus-bandwidth curve);
3. the change plan (written to the work folder as YAML) and the canaries it allows;
4. the change lands on the canaries; capture, snapshot and phases 0-3 again;
5. the gate: each canary against its baseline under the plan and the default policy;
6. the reports (HTML, JUnit XML, Markdown, JSON) beside the console output; on PASS the canaries'
   snapshots become the new baselines, tagged `rocm-6.2.0`.

Design decisions:
- Every step uses the real code path (see `demo.fleet`); nothing is precomputed or mocked, so the demo
  doubles as an end-to-end test of the package.
- The blocked story injects two failures that CVF's own phases do not catch: canary 1's GPUs enumerate
  in reverse order (the incident of the seeds) and canary 2's mesh bus bandwidth falls 20%, which keeps
  its sweep average (about 102 GB/s) above CVF's absolute PHASE2_BW_THRESHOLD of 100 GB/s. Only the
  comparison with each node's own baseline finds them.
- The work folder keeps what a user may want to open or replay: the plan, the bundles, the snapshots,
  the store and the reports. The fake nodes themselves (executables and response tables) are removed
  at the end unless `keep_nodes` is set.
"""

from __future__ import annotations

import functools
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from upgrade_gate.collect.capture import OutputCheck, format_taken_at
from upgrade_gate.demo import fleet as demo_fleet
from upgrade_gate.demo.canaries import describe_rule, select_canaries
from upgrade_gate.demo.fleet import NodeEvidence
from upgrade_gate.demo.plan import PLAN_FILE, POLICY_FILE, read_plan, read_policy, summarize, write_plan, write_policy
from upgrade_gate.demo.workload import WORKLOAD, apply_scenario, demo_config, torch_missing
from upgrade_gate.errors import EnvironmentFailure, StoreError, UsageError
from upgrade_gate.fakenode import NodeSpec, faults
from upgrade_gate.judge.checklist import load_checklist
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.plan import CanarySettings
from upgrade_gate.judge.rules.evidence import read_clock
from upgrade_gate.model import GateReport, NodeName, Snapshot, Verdict, replace
from upgrade_gate.report.interface import ReportContext, ReportFormat
from upgrade_gate.report.registry import render
from upgrade_gate.store.inputs import load_judge_inputs
from upgrade_gate.validate.config import CvfConfig

if TYPE_CHECKING:
    from upgrade_gate.store.gitstore import BaselineStore

Say = Callable[[str], None]
"""Receives the narration, one line at a time."""

CHECKLIST = "canary"
ATTESTED_BY = "demo-operator"
ATTESTATIONS: Mapping[str, str] = {"canary.hsa-signals": ATTESTED_BY}
"""The canary checklist's manual items, attested for the demo (a real operator uses --attest ITEM=NAME)."""

OLD = demo_fleet.ROCM_6_1_3
NEW = demo_fleet.ROCM_6_2_0
OLD_TAG = f"rocm-{OLD.rocm}"
NEW_TAG = f"rocm-{NEW.rocm}"
MESH_DROP_FACTOR = 0.8
"""Canary 2's bus bandwidth after the change in the blocked story (a 20% drop)."""

REPORT_FILES: Mapping[ReportFormat, str] = {
    ReportFormat.HTML: "report.html",
    ReportFormat.JUNIT: "junit.xml",
    ReportFormat.MARKDOWN: "report.md",
    ReportFormat.JSON: "report.json",
}
"""Where each report goes inside `<workdir>/reports/` (the console report is printed)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoOutcome:
    """What the demo did and where it left everything."""

    workdir: Path
    healthy: bool
    verdict: Verdict
    report: GateReport
    console: str
    reports: Mapping[ReportFormat, Path]
    canaries: tuple[NodeName, ...]
    store: Path
    plan: Path
    policy: Path
    candidates: Mapping[NodeName, Path]
    promoted_tag: str | None
    replay_argv: tuple[str, ...]
    seconds: float


def prepare_workdir(workdir: Path) -> Path:
    """Create `workdir` if needed; refuse one that already holds files (a UsageError, exit 2)."""
    workdir = Path(workdir).resolve()
    if workdir.exists() and (not workdir.is_dir() or any(workdir.iterdir())):
        raise UsageError(f"--workdir {workdir}: exists and is not an empty folder")
    try:
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvironmentFailure(f"{workdir}: cannot create the work folder: {exc.strerror or exc}") from exc
    return workdir


@dataclass(frozen=True, slots=True, kw_only=True)
class _Setting:
    """What every step needs: where to work, how to talk, how to check probe output."""

    workdir: Path
    healthy: bool
    say: Say
    output_check: OutputCheck
    config: CvfConfig
    scenario: str | None = None
    workload: bool = True  # False: PyTorch is not installed, phases 6-7 are not run (their items stay unverified)
    attestations: Mapping[str, str] = field(default_factory=lambda: dict(ATTESTATIONS))


def run_demo(
    workdir: Path,
    *,
    healthy: bool,
    say: Say,
    output_check: OutputCheck,
    color: bool = False,
    keep_nodes: bool = False,
    scenario: str | None = None,
) -> DemoOutcome:
    """Play the story in `workdir` (empty or absent) and return the outcome (`scenario`: demo.workload)."""
    started = time.monotonic()
    st = _Setting(
        workdir=prepare_workdir(workdir),
        healthy=healthy or scenario is not None,
        say=say,
        output_check=output_check,
        config=demo_config(),
        scenario=scenario,
        workload=(healthy or scenario is not None) and not torch_missing(),  # the blocked story keeps to its two
    )
    if healthy and not st.workload:  # no PyTorch: the training items are attested, never shown as passed
        st = dc_replace(st, attestations={**ATTESTATIONS, **dict.fromkeys(workload_items(), ATTESTED_BY)})
    elif st.workload:  # the demo policy judges CPU init time leniently: that item is attested, never shown as passed
        st = dc_replace(st, attestations={**ATTESTATIONS, **dict.fromkeys(lenient_items(), ATTESTED_BY)})
    variant = "healthy variant: the change is clean" if healthy else "the change breaks two canaries"
    variant = f"scenario {scenario}" if scenario is not None else variant
    say(f"upgrade-gate demo ({variant}): ROCm {OLD.rocm} -> {NEW.rocm} on an 8-node MI300X fleet.")
    say("Offline: fake nodes whose tools print real output formats; no GPU, network or cluster is used.")
    say(f"Work folder: {st.workdir}")
    names = demo_fleet.node_names()
    planned = select_canaries(names, read_plan(write_plan(st.workdir / PLAN_FILE)).canaries)
    store = _before_the_change(st, names, planned)
    plan_path, policy_path, canaries = _plan_and_canaries(st, names)
    after = _change_the_canaries(st, canaries)
    report, ctx = _gate(st, store, plan_path, policy_path, {n: after[n].snapshot for n in canaries}, color)
    reports = _write_reports(st.workdir / "reports", ctx)
    say("")
    folder = st.workdir / "reports"
    say(f"[6/6] Reports in {folder}/: {', '.join(p.name for p in reports.values())}")
    promoted = _promote(st, store, ctx, len(names)) if report.verdict is Verdict.PASS else None
    if not keep_nodes:
        shutil.rmtree(st.workdir / "fleet", ignore_errors=True)
    snapshot_paths = [after[n].snapshot_path for n in canaries]
    return DemoOutcome(
        workdir=st.workdir,
        healthy=healthy,
        verdict=report.verdict,
        report=report,
        console=render(ReportFormat.CONSOLE, ctx),
        reports=reports,
        canaries=canaries,
        store=store,
        plan=plan_path,
        policy=policy_path,
        candidates=dict(zip(canaries, snapshot_paths, strict=True)),
        promoted_tag=promoted,
        replay_argv=gate_argv(store, plan_path, policy_path, snapshot_paths, st.attestations),
        seconds=time.monotonic() - started,
    )


def _before_the_change(st: _Setting, names: tuple[NodeName, ...], canaries: tuple[NodeName, ...]) -> Path:
    """Steps 1-2: the fleet, its snapshots and phases (the plan's canaries also run the reference training
    run, phase 6), saved as baselines tagged OLD_TAG; the store."""
    say = st.say
    say("")
    say(f"[1/6] The fleet: {len(names)} fake nodes of class {demo_fleet.NODE_CLASS} (8x MI300X, 8 NICs each) on ROCm")
    say(f"      {OLD.rocm} with amdgpu {OLD.driver}; each node has its own GPU serials and NIC GUIDs.")
    say("")
    say("[2/6] Before the change: capture every probe, build a snapshot, and run CVF phases 0-3 on every node")
    say("      (phase 2 measures each node's bus bandwidth curve, so the baseline has numbers to compare with).")
    specs = apply_scenario({n: demo_fleet.node_spec(n, OLD) for n in names}, canaries, st.scenario, after=False)
    phases = {c: demo_fleet.VALIDATION_PHASES | {6} for c in canaries} if st.workload else {}
    if st.workload:
        say(f"      The plan's canaries ({', '.join(canaries)}) also run the reference training workload (phase 6):")
        say("      PyTorch DDP for real on the CPUs, two ranks, on the fake node's GPU identities.")
    elif st.healthy and torch_missing():
        say("      PyTorch is not installed (pip install 'upgrade-gate[workload]'): no reference training run;")
        say(f"      its checklist items are attested as {ATTESTED_BY} and read `attested (no evidence ...)`, not pass.")
    before = demo_fleet.gather(
        specs,
        fleet_root=st.workdir / "fleet",
        out=st.workdir / "before",
        config=st.config,
        output_check=st.output_check,
        phases=phases,
    )
    for line in fleet_lines([before[n] for n in names]):
        say(line)
    broken = [e.node for e in before.values() if e.failed_probes or not e.all_phases_passed]
    if broken:
        raise EnvironmentFailure(f"demo fleet is not healthy before the change: {', '.join(broken)}")
    store = st.workdir / "store"
    sha = _save(store, [before[n].snapshot for n in names], tag=OLD_TAG, message=f"baselines before ROCm {NEW.rocm}")
    say(f"      Saved {len(names)} baselines to the git store {store} as {sha[:12]}, tagged {OLD_TAG}.")
    return store


def _plan_and_canaries(st: _Setting, names: tuple[NodeName, ...]) -> tuple[Path, Path, tuple[NodeName, ...]]:
    """Step 3: the plan and policy files, and the canaries the plan allows."""
    plan_path = write_plan(st.workdir / PLAN_FILE)
    policy_path = write_policy(st.workdir / POLICY_FILE)
    plan = read_plan(plan_path)
    canaries = select_canaries(names, plan.canaries)
    st.say("")
    st.say(f"[3/6] The change plan {plan_path}: {summarize(plan)}.")
    st.say(f"      Canaries: {describe_rule(plan.canaries, len(names))}: {', '.join(canaries)}.")
    st.say(f"      (The default is {describe_rule(CanarySettings(), len(names))}; the demo plan allows")
    st.say(f"      {plan.canaries.max_fraction:.0%} so that one run shows two different failures.)")
    return plan_path, policy_path, canaries


def _change_the_canaries(st: _Setting, canaries: tuple[NodeName, ...]) -> dict[NodeName, NodeEvidence]:
    """Step 4: the new release (and, in the blocked story, its damage) on the canaries; their evidence."""
    say = st.say
    say("")
    say(f"[4/6] The change lands on the canaries: ROCm {NEW.rocm}, amdgpu {NEW.driver}.")
    changed = {n: demo_fleet.node_spec(n, NEW) for n in canaries}
    if st.scenario is not None:
        changed = apply_scenario(changed, canaries, st.scenario, after=True, say=say)
    elif st.healthy:
        say("      Healthy variant: nothing else changes on them.")
        changed = apply_scenario(changed, canaries, None, after=True)
    else:
        changed = _break(apply_scenario(changed, canaries, None, after=True), canaries, say)
    workload = ", phases 6-7 (training run, device-order perturbation)" if st.workload else ""
    say(f"      Then capture, snapshot, CVF phases 0-3{workload} again, on the canaries only:")
    after = demo_fleet.gather(
        changed,
        fleet_root=st.workdir / "fleet",
        out=st.workdir / "after",
        config=st.config,
        output_check=st.output_check,
        on_done=lambda e: say(node_line(e)),
        phases={c: demo_fleet.VALIDATION_PHASES | (WORKLOAD if st.workload else frozenset()) for c in canaries},
    )
    if all(e.all_phases_passed for e in after.values()):
        if st.healthy:
            say(f"      Every canary passed CVF phases 0-3{' and phases 6-7' if st.workload else ''}.")
        else:
            say("      CVF's own phases pass every canary: on their own they would let this change through.")
    return after


def _gate(
    st: _Setting,
    store: Path,
    plan_path: Path,
    policy_path: Path,
    candidates: Mapping[NodeName, Snapshot],
    color: bool,
) -> tuple[GateReport, ReportContext]:
    """Step 5: judge the canaries against their baselines and the class reference; print the console report."""
    say = st.say
    say("")
    say(f"[5/6] The gate: each canary against its {OLD_TAG} baseline and the class reference, under {plan_path.name}")
    say(f"      and {policy_path.name}; the canary checklist's manual items attested as {ATTESTED_BY} (--attest).")
    lenient = [i for i in lenient_items() if i in st.attestations and st.workload]
    if lenient:
        say(f"      So is {', '.join(lenient)}: {policy_path.name} judges init time more leniently than the default.")
    with _open_store(store) as opened:  # the canaries' baselines at OLD_TAG, as `gate --ref` reads them
        inputs = load_judge_inputs(opened, OLD_TAG, list(candidates.values()))
    baselines = inputs.baselines
    report = judge(
        baselines=baselines,
        candidates=list(candidates.values()),
        plan=read_plan(plan_path),
        policy=read_policy(policy_path),
        references=inputs.references,
        denylist=inputs.denylist,
        attestations=st.attestations,
        checklists=[load_checklist(CHECKLIST)],
        now=format_taken_at(datetime.now(UTC)),
        clock=read_clock(),  # the wall clock (evidence.taken_at), whatever time the report says
    )
    ctx = ReportContext(report=report, baselines=baselines, candidates=candidates)
    for line in render(ReportFormat.CONSOLE, replace(ctx, color=color)).rstrip("\n").splitlines():
        say(line)
    return report, ctx


@functools.cache
def lenient_items() -> tuple[str, ...]:
    """The canary checklist's items with a rule that the demo policy judges more leniently than the shipped
    default (init time, for the laptop's CPU noise): a checklist reads them `unverified` unless attested."""
    from upgrade_gate.demo.plan import POLICY_TEXT
    from upgrade_gate.judge.policy import policy_from_text

    policy = policy_from_text(POLICY_TEXT, source="demo policy")
    items = load_checklist(CHECKLIST).items
    return tuple(it.id for it in items if any(policy.loosened(r, demo_fleet.NODE_CLASS) for r in it.rules))


def workload_items() -> tuple[str, ...]:
    """The canary checklist's items whose evidence is the workload phases (6-7): without PyTorch the
    healthy demo cannot run them, so a named person (the demo operator) attests them instead."""
    items = load_checklist(CHECKLIST).items
    return tuple(it.id for it in items if set(it.phases) & {6, 7} or any(r.startswith("workload.") for r in it.rules))


def _promote(st: _Setting, store: Path, ctx: ReportContext, fleet_size: int) -> str:
    """On PASS: the canaries' snapshots become their baselines, tagged NEW_TAG."""
    sha = _save(store, list(ctx.candidates.values()), tag=NEW_TAG, message=f"promote canaries to ROCm {NEW.rocm}")
    st.say(f"      PASS: the canaries' new snapshots are now their baselines ({sha[:12]}, tagged {NEW_TAG});")
    others = fleet_size - len(ctx.candidates)
    st.say(f"      the other {others} nodes keep their {OLD_TAG} baselines until their own turn.")
    return NEW_TAG


def gate_argv(
    store: Path, plan: Path, policy: Path, candidates: list[Path], attestations: Mapping[str, str] = ATTESTATIONS
) -> tuple[str, ...]:
    """The `upgrade-gate gate ...` arguments that reproduce the demo's verdict from its files."""
    argv = ["gate", "--store", str(store), "--ref", OLD_TAG, "--plan", str(plan), "--policy", str(policy)]
    argv += ["--checklist", CHECKLIST]
    for item, who in sorted(attestations.items()):
        argv += ["--attest", f"{item}={who}"]
    for path in candidates:
        argv += ["--candidate", str(path)]
    return tuple(argv)


def _break(specs: dict[NodeName, NodeSpec], canaries: tuple[NodeName, ...], say: Say) -> dict[NodeName, NodeSpec]:
    """The blocked story: reverse canary 1's GPU order, cut canary 2's mesh bandwidth by 20%."""
    if len(canaries) < 2:
        raise EnvironmentFailure(f"the demo plan gives {len(canaries)} canary; the blocked story needs two")
    first, second = canaries[0], canaries[1]
    out = dict(specs)
    out[first] = faults.reverse_enumeration(specs[first])
    out[second] = faults.scale_mesh_bandwidth(specs[second], MESH_DROP_FACTOR)
    say(f"      On {first} the new stack enumerates the GPUs in reverse order (the incident this tool exists for).")
    drop = round((1 - MESH_DROP_FACTOR) * 100)
    say(f"      On {second} the intra-node all_reduce bus bandwidth falls {drop}% at every message size.")
    return out


def node_line(e: NodeEvidence) -> str:
    """One node's evidence in one line: ROCm, probes, GPUs, NICs, phases, mesh bandwidth."""
    snap = e.snapshot
    probes = f"{len(snap.probes)} probes" + (f" ({len(e.failed_probes)} failed)" if e.failed_probes else " ok")
    bw = demo_fleet.measured_mesh_bw(e.phases)
    rate = next((a for p in e.phases for k, a in p.annotations.items() if k.endswith("-measured-samples-per-s")), None)
    return (
        f"      {e.node}  ROCm {snap.software.rocm_version}  {probes}, {len(snap.gpus)} GPUs,"
        f" {len(snap.nics)} NICs; phases {demo_fleet.phase_summary(e.phases)}"
        + (f"; mesh avg busbw {bw}" if bw else "")
        + (f"; training {rate} samples/s" if rate else "")
    )


def fleet_lines(evidence: Sequence[NodeEvidence]) -> list[str]:
    """The healthy fleet in one line (a node that differs gets its own line)."""
    healthy = [e for e in evidence if not e.failed_probes and e.all_phases_passed]
    if len(healthy) != len(evidence) or not healthy:
        return [node_line(e) for e in evidence]
    first = healthy[0].snapshot
    bws = sorted(float(bw.split()[0]) for e in healthy if (bw := demo_fleet.measured_mesh_bw(e.phases)) is not None)
    phases = sorted({p.phase for e in healthy for p in e.phases if p.phase < 6})
    span = f"; mesh avg busbw {bws[0]:.1f}-{bws[-1]:.1f} GB/s" if bws else ""
    trained = [e.node for e in healthy if any(p.phase == 6 for p in e.phases)]
    return [
        f"      {len(healthy)} nodes: ROCm {first.software.rocm_version}, {len(first.probes)} probes ok, "
        f"{len(first.gpus)} GPUs, {len(first.nics)} NICs each; phases {demo_fleet.spans(phases)} passed{span}",
        *([f"      phase 6 (training run) passed on {', '.join(trained)}"] if trained else []),
    ]


def _open_store(path: Path) -> BaselineStore:
    try:
        from upgrade_gate.store.gitstore import BaselineStore
    except ImportError as exc:  # gitpython refuses to import when no git binary is found
        raise StoreError(f"{path}: the baseline store needs the git binary: {exc}") from exc
    return BaselineStore(path)


def _save(store: Path, snapshots: list[Snapshot], *, tag: str, message: str) -> str:
    with _open_store(store) as st:
        return st.save(snapshots, tag=tag, message=message)


def _write_reports(folder: Path, ctx: ReportContext) -> dict[ReportFormat, Path]:
    from upgrade_gate.docio import write_text_atomic

    out: dict[ReportFormat, Path] = {}
    for fmt, name in REPORT_FILES.items():
        path = folder / name
        write_text_atomic(path, render(fmt, ctx))
        out[fmt] = path
    return out
