"""`upgrade-gate demo --vendor nvidia`: the incident on an 8-node fake H100 fleet, offline.

NVIDIA driver 550.127.05 -> 570.158.01 (with the GSP firmware that ships inside it) on the `h100-8gpu`
class; the plan's default canary share (10% of 8: one node) takes the change first. In the blocked story
the new driver enumerates the canary's GPUs in reverse order while every probe stays green: the gate
blocks with the pin in CUDA's words (CUDA_DEVICE_ORDER=PCI_BUS_ID, CUDA_VISIBLE_DEVICES by UUID). In the
healthy story the change passes and the canary's snapshot becomes its new baseline.

Every step is the real code path, as in the AMD demo (`demo.story`): fake nodes (`fakenode.nvidia`) whose
nvidia-smi prints real formats, `collect.capture` with the NVIDIA catalogue, `snapshot.build_snapshot`, a
git baseline store, `judge` with the plan and policy read back through their loaders, the reports.

Design decisions:
- Phases 0 (eligibility), 1 (GPU hardware acceptance as `dcgmi diag -r 2`, `validate.phases.dcgm`) and 2
  (the intra-node mesh as nccl-tests `all_reduce_perf` sampled by nvidia-smi, `validate.phases.nvidia_mesh`)
  run on every node through the real pipeline (`validate.phases.select_phases` with `vendors.NVIDIA`, as
  `validate --vendor nvidia` picks them), so each baseline carries its bus-bandwidth curve. The demo policy
  requires phases 1-2, judges the bandwidth rules (the shipped default's) and names NVIDIA's required
  probes (`vendors.NVIDIA.anchor_probes`). Phases 3-5 are not run: 3 is the NICs' and runs the same
  commands on both vendors (the AMD demo covers it), 4-5 need nodes that reach each other (the policy marks
  them not applicable to the class, as the AMD demo's does).
- One canary (the default 10% share), so the story is the incident alone and fits the 60-line budget.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from upgrade_gate.collect.bundle import write_bundle
from upgrade_gate.collect.capture import OutputCheck, capture, format_taken_at
from upgrade_gate.collect.probes import probe_catalogue
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.demo.canaries import describe_rule, select_canaries
from upgrade_gate.demo.fleet import measured_mesh_bw, node_names, phase_summary
from upgrade_gate.demo.plan import read_plan, read_policy
from upgrade_gate.demo.story import REPORT_FILES, DemoOutcome, Say, prepare_workdir
from upgrade_gate.docio import write_text_atomic
from upgrade_gate.errors import EnvironmentFailure, StoreError
from upgrade_gate.fakenode.nvidia import (
    DRIVER_550,
    DRIVER_570,
    Driver,
    NvidiaNodeSpec,
    build_nvidia_node,
    h100_node,
    reverse_order,
)
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.rules.evidence import read_clock
from upgrade_gate.model import NodeName, PhaseStatus, Snapshot, Verdict, replace
from upgrade_gate.report.interface import ReportContext, ReportFormat
from upgrade_gate.report.registry import render
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.snapshot.io import write_snapshot
from upgrade_gate.store.inputs import load_judge_inputs
from upgrade_gate.validate.config import default_config
from upgrade_gate.validate.launcher import LocalLauncher
from upgrade_gate.validate.phases import select_phases
from upgrade_gate.validate.phases.dcgm import ARGV as DCGM_ARGV
from upgrade_gate.validate.phases.mesh import TOOL as MESH_TOOL
from upgrade_gate.validate.pipeline import run_pipeline
from upgrade_gate.vendors import NVIDIA

NODE_CLASS = "h100-8gpu"
OLD, NEW = DRIVER_550, DRIVER_570
OLD_TAG = f"nvidia-{OLD.version}"
NEW_TAG = f"nvidia-{NEW.version}"
PLAN_FILE = "plan.yaml"
POLICY_FILE = "policy.yaml"
PHASES = frozenset({0, 1, 2})
"""The phases every demo node runs (`select_phases` with NVIDIA: eligibility, dcgmi diag, nccl-tests)."""

PLAN_TEXT = f"""\
# Change plan written by `upgrade-gate demo --vendor nvidia` (schema: schemas/change-plan.schema.json).
id: nvidia-{OLD.version}-to-{NEW.version}
description: >-
  NVIDIA driver {OLD.version} -> {NEW.version} (CUDA {OLD.cuda} -> {NEW.cuda}) on the {NODE_CLASS} class.
  Nothing else is meant to change: GPU order and identity, VBIOS, inforom, NVLink, NICs must match.
change:
  driver: {{from: "{OLD.version}", to: "{NEW.version}"}}
  firmware:
    # The GSP firmware ships inside the driver package: nvidia-smi reports the driver's version for it.
    - {{block: gsp, from: "{OLD.version}", to: "{NEW.version}"}}
"""

POLICY_TEXT = f"""\
# Policy written by `upgrade-gate demo --vendor nvidia` (schema: schemas/policy.schema.json), laid over the
# shipped default policy (every rule on, the bandwidth rules included).
name: demo-nvidia
description: >-
  Phases 1-2 as dcgmi diag and nccl-tests all_reduce_perf are required; CVF phases 4-5 do not apply to the
  demo's stand-alone fake nodes; NVIDIA's required probes.
phases:
  not_applicable:
    # Phases 4 (per-rail RDMA between node pairs) and 5 (multi-node nccl-tests) need nodes that reach each
    # other; the demo's fake nodes each run alone. On a real cluster leave them required.
    {NODE_CLASS}: [4, 5]
rules:
  - id: evidence.missing
    params:
      required_phases: [1, 2]
      required_probes: [{", ".join(NVIDIA.anchor_probes)}]
"""


def node_spec(name: NodeName, driver: Driver) -> NvidiaNodeSpec:
    """Demo node `name` on `driver` (seed = its position, so identity survives the change)."""
    return h100_node(name, seed=int(name.rsplit("-", 1)[1]), driver=driver, node_class=NODE_CLASS)


def run_nvidia_demo(
    workdir: Path,
    *,
    healthy: bool,
    say: Say,
    output_check: OutputCheck,
    color: bool = False,
    keep_nodes: bool = False,
    canary_fault: Callable[[NvidiaNodeSpec], NvidiaNodeSpec] | None = None,
) -> DemoOutcome:
    """Play the NVIDIA story in `workdir` (empty or absent) and return the outcome.

    `canary_fault`: a further change to the first canary's spec after the change lands (tests inject a
    fault the gate must catch, e.g. a mesh bandwidth drop through `fakenode.faults`); the CLI passes none."""
    started = time.monotonic()
    workdir = prepare_workdir(workdir)
    variant = "healthy variant: the change is clean" if healthy else "the change breaks a canary"
    say(f"upgrade-gate demo --vendor nvidia ({variant}): NVIDIA driver {OLD.version} -> {NEW.version}")
    say("on an 8-node H100 fleet. Offline: fake nodes whose nvidia-smi prints real output formats.")
    say(f"Work folder: {workdir}")
    names = node_names()
    say("")
    say(f"[1/6] The fleet: {len(names)} fake nodes of class {NODE_CLASS} (8x H100 SXM5 with NVLink, 8 NICs each)")
    say(f"      on driver {OLD.version} (CUDA {OLD.cuda}); each node has its own GPU serials and UUIDs.")
    before = _gather({n: node_spec(n, OLD) for n in names}, workdir, "before", output_check)
    first = before[names[0]]
    healthy_nodes = all(_clean(s) for s in before.values())
    probes = f"{len(first.probes)} probes ok" if healthy_nodes else None
    if probes is None:
        broken = sorted(n for n, s in before.items() if not _clean(s))
        raise EnvironmentFailure(f"demo fleet is not healthy before the change: {', '.join(broken)}")
    say("")
    say("[2/6] Before the change: capture every NVIDIA probe (nvidia-smi -q -x, topo -m, nvlink -s, ...),")
    say(f"      build a snapshot and run phases 0-2 on every node: 1 is {' '.join(DCGM_ARGV)}, 2 nccl-tests")
    say(f"      {MESH_TOOL} (the NVLink mesh's bus bandwidth curve, so the baseline has numbers to compare).")
    shape = f"{len(first.gpus)} GPUs, {len(first.gpu_links)} NVLink pairs"
    say(f"      Each node: {probes}, {shape}, phases {_phases(first)}; mesh avg busbw {_busbw(before.values())}.")
    store = workdir / "store"
    sha = _save(store, [before[n] for n in names], tag=OLD_TAG, message=f"baselines before driver {NEW.version}")
    say(f"      Saved {len(names)} baselines to the git store {store} as {sha[:12]}, tagged {OLD_TAG}.")
    plan_path, policy_path = workdir / PLAN_FILE, workdir / POLICY_FILE
    write_text_atomic(plan_path, PLAN_TEXT)
    write_text_atomic(policy_path, POLICY_TEXT)
    plan = read_plan(plan_path)
    canaries = select_canaries(names, plan.canaries)
    say("")
    say(f"[3/6] The change plan {plan_path}: NVIDIA driver {OLD.version} -> {NEW.version}, with the")
    say(f"      GSP firmware inside it (firmware gsp {OLD.version} -> {NEW.version}).")
    say(f"      Canaries: {describe_rule(plan.canaries, len(names))}: {', '.join(canaries)}.")
    say("")
    say(f"[4/6] The change lands on the canary: driver {NEW.version} (CUDA {NEW.cuda}).")
    changed = {n: node_spec(n, NEW) for n in canaries}
    if healthy:
        say("      Healthy variant: nothing else changes on it.")
    else:
        changed = {n: reverse_order(s) if n == canaries[0] else s for n, s in changed.items()}
        say(f"      On {canaries[0]} the new driver enumerates the GPUs in reverse order; every probe, dcgmi diag")
        say("      and nccl-tests stay green (the incident this tool exists for).")
    if canary_fault is not None:
        changed = {n: canary_fault(s) if n == canaries[0] else s for n, s in changed.items()}
        say(f"      On {canaries[0]} a further fault is injected into the fake node's tools.")
    after = _gather(changed, workdir, "after", output_check)
    for name in canaries:
        snap = after[name]
        mesh = f"mesh avg busbw {_busbw([snap])}"
        say(f"      {name}: driver {snap.software.driver_version}, phases {_phases(snap)}; {mesh}.")
    say("")
    say(f"[5/6] The gate: the canary against its {OLD_TAG} baseline and the class reference, under")
    say(f"      {plan_path.name} and {policy_path.name}:")
    candidates = {n: after[n] for n in canaries}
    with _open_store(store) as opened:
        inputs = load_judge_inputs(opened, OLD_TAG, list(candidates.values()))
    report = judge(
        baselines=inputs.baselines,
        candidates=list(candidates.values()),
        plan=plan,
        policy=read_policy(policy_path),
        references=inputs.references,
        denylist=inputs.denylist,
        now=format_taken_at(datetime.now(UTC)),
        clock=read_clock(),
    )
    ctx = ReportContext(report=report, baselines=inputs.baselines, candidates=candidates)
    for line in render(ReportFormat.CONSOLE, replace(ctx, color=color)).rstrip("\n").splitlines():
        say(line)
    reports = {fmt: workdir / "reports" / name for fmt, name in REPORT_FILES.items()}
    for fmt, path in reports.items():
        write_text_atomic(path, render(fmt, ctx))
    say("")
    say(f"[6/6] Reports in {workdir / 'reports'}/: {', '.join(p.name for p in reports.values())}")
    promoted = None
    if report.verdict is Verdict.PASS:
        sha = _save(store, list(candidates.values()), tag=NEW_TAG, message=f"promote canaries to {NEW.version}")
        say(f"      PASS: the canary's new snapshot is now its baseline ({sha[:12]}, tagged {NEW_TAG}).")
        promoted = NEW_TAG
    if not keep_nodes:
        shutil.rmtree(workdir / "fleet", ignore_errors=True)
    paths = [workdir / "after" / "snapshots" / f"{n}.json" for n in canaries]
    argv = ["gate", "--store", str(store), "--ref", OLD_TAG, "--plan", str(plan_path), "--policy", str(policy_path)]
    for path in paths:
        argv += ["--candidate", str(path)]
    return DemoOutcome(
        workdir=workdir,
        healthy=healthy,
        verdict=report.verdict,
        report=report,
        console=render(ReportFormat.CONSOLE, ctx),
        reports=reports,
        canaries=canaries,
        store=store,
        plan=plan_path,
        policy=policy_path,
        candidates=dict(zip(canaries, paths, strict=True)),
        promoted_tag=promoted,
        replay_argv=tuple(argv),
        seconds=time.monotonic() - started,
    )


def _gather(
    specs: Mapping[NodeName, NvidiaNodeSpec], workdir: Path, stage: str, output_check: OutputCheck
) -> dict[NodeName, Snapshot]:
    """Build, capture and snapshot every node (one thread each); bundles and snapshots under workdir/stage."""

    def one(name: NodeName) -> Snapshot:
        node = build_nvidia_node(workdir / "fleet" / name, specs[name])
        bundle = capture(
            LocalRunner(env=node.env(os.environ)),
            node=name,
            host_root=node.host_root,
            hostname=name,
            output_check=output_check,
            probes=probe_catalogue(node.host_root, vendor=NVIDIA),
        )
        write_bundle(bundle, workdir / stage / "bundles" / name)
        snapshot = build_snapshot(bundle, node_class=NODE_CLASS)
        results = run_pipeline(
            [name],
            phases=select_phases(PHASES, NVIDIA),
            config=default_config(),
            launcher=LocalLauncher({name: node.env(os.environ)}),
            snapshots={name: snapshot},
        )[name]
        snapshot = replace(snapshot, phases=results)
        write_snapshot(snapshot, workdir / stage / "snapshots" / f"{name}.json")
        return snapshot

    names = sorted(specs)
    with ThreadPoolExecutor(max_workers=max(1, len(names)), thread_name_prefix="demo-nvidia") as pool:
        return dict(zip(names, pool.map(one, names), strict=True))


def _clean(snapshot: Snapshot) -> bool:
    """Every probe ok and every phase passed."""
    phases = snapshot.phases
    return all(p.ok for p in snapshot.probes) and bool(phases) and all(p.status is PhaseStatus.PASSED for p in phases)


def _phases(snapshot: Snapshot) -> str:
    """`0-2 passed`, or each phase with its status."""
    return phase_summary(snapshot.phases)


def _busbw(snapshots: Iterable[Snapshot]) -> str:
    """Phase 2's average bus bandwidth (`demo.fleet.measured_mesh_bw`) over `snapshots`: `X GB/s` or
    `X-Y GB/s`; `none` where a node has none (phase 2 did not measure: the policy then blocks on it)."""
    found = [measured_mesh_bw(snap.phases) for snap in snapshots]
    if not found or None in found:
        return "none"
    values = [float(str(bw).split()[0]) for bw in found]
    low, high = min(values), max(values)
    return f"{low:.1f} GB/s" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f} GB/s"


def _open_store(path: Path):  # type: ignore[no-untyped-def]  # gitstore is imported only here (lazily)
    try:
        from upgrade_gate.store.gitstore import BaselineStore
    except ImportError as exc:  # gitpython refuses to import when no git binary is found
        raise StoreError(f"{path}: the baseline store needs the git binary: {exc}") from exc
    return BaselineStore(path)


def _save(store: Path, snapshots: list[Snapshot], *, tag: str, message: str) -> str:
    with _open_store(store) as opened:
        sha: str = opened.save(snapshots, tag=tag, message=message)
        return sha
