"""The `validate` command: run the CVF phases on this host (local executor) and record the results.

Local mode captures this host (every probe, like `capture`), builds its snapshot, runs the requested
phases with a `LocalLauncher`, prints one line per phase, and with `--out` writes the snapshot with its
`phases` filled in: a SNAPSHOT document that `gate --candidate OUT` accepts directly (the phase
measurements travel inside the phase results).

Exit codes: 0 when every requested phase passed; 1 when any phase failed, errored, was skipped or was
not run (BLOCK: a skipped phase is not a pass); 2 for bad flags (`--phases 8`); 3 for a bad config file
(the key and the file are named); 4 when the snapshot cannot be built or written.

Design decisions:
- `--phases` defaults to 0-3 (the single-node phases) and to 0-5 when `--peer` names partners; the
  workload phases (6 `workload`, 7 `perturbation`, docs/workload.md) run only when asked for.
- The local executor runs commands on this host only. `--peer` nodes take part in phase 5 through
  `mpirun -H` (which reaches them itself); phase 4 needs an `ib_write_bw` server on the peer, which
  only the Kubernetes executor can start, so locally it ends in `error` naming the peer, never a pass.
- Progress (rich) goes to stderr, so `--json` output on stdout stays clean.
- Re-measure when inconclusive (issue 14): the bandwidth phases take more samples of a metric whose
  floor (or, with `--baseline`, whose comparison with the node's baseline) is inconclusive, up to the
  policy's `bandwidth.regression.max_samples` (`--policy`, default the shipped policy).
- `--out` often replaces the snapshot `snapshot --class` wrote for the same node (README workflow 1):
  without `--class`, the class of that snapshot is kept, so class references keep working.
- `--vendor amd|nvidia|auto` (issue 30) picks the probes captured and the phases 1-2 run (docs/vendors.md):
  NVIDIA's are `dcgmi diag -r 2` and nccl-tests with nvidia-smi sampling. `auto` (the default) is NVIDIA
  when `nvidia-smi` is on PATH and `rocminfo` is not, AMD otherwise (a host with both, or neither, keeps
  the AMD default: an AMD capture on an NVIDIA node then blocks on its missing probes, never passes).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from upgrade_gate.errors import EnvironmentFailure, ExitCode, UsageError
from upgrade_gate.model import replace
from upgrade_gate.report.printable import json_printable, one_line

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import TaskID

    from upgrade_gate.model import PhaseResult
    from upgrade_gate.validate.config import CvfConfig
    from upgrade_gate.validate.pipeline import ProgressEvent
    from upgrade_gate.validate.remeasure import Resampling
    from upgrade_gate.vendors import Vendor

ALL_PHASES = frozenset(range(6))
WORKLOAD_PHASES = {"workload": 6, "perturbation": 7}
"""The workload phases by name (docs/workload.md): asked for explicitly, never in a default set."""


def register(app: typer.Typer) -> None:
    """Add `validate` to the app."""
    app.command("validate")(validate_cmd)


def parse_phases(text: str) -> frozenset[int]:
    """`0-5`, `2`, `0,2,3`, `1-3,5` or `2,workload,perturbation` (6, 7) -> phase numbers; UsageError otherwise."""
    numbers: set[int] = set()
    for part in text.split(","):
        named = WORKLOAD_PHASES.get(part.strip())
        if named is not None:
            numbers.add(named)
            continue
        m = re.fullmatch(r"\s*(\d)\s*(?:-\s*(\d)\s*)?", part)
        if m is None:
            raise UsageError(f"--phases {text!r}: expected phase numbers 0-7 or names such as 0-5, 2 or 0,2,workload")
        low = int(m.group(1))
        high = int(m.group(2)) if m.group(2) is not None else low
        if low > high or high > 7:
            raise UsageError(f"--phases {text!r}: phases are numbered 0 to 7 (6 workload, 7 perturbation)")
        numbers.update(range(low, high + 1))
    return frozenset(numbers)


def resolve_vendor(name: str) -> Vendor:
    """`--vendor`: amd or nvidia by name; `auto`: NVIDIA when nvidia-smi is on PATH and rocminfo is not."""
    from upgrade_gate.vendors import AMD, NVIDIA, vendor_named

    if name != "auto":
        return vendor_named(name)  # exit 2 naming the choices for an unknown vendor
    return NVIDIA if shutil.which("nvidia-smi") and not shutil.which("rocminfo") else AMD


def validate_cmd(
    phases: str | None = typer.Option(
        None,
        "--phases",
        help="Phases to run: 0-5, 2, 0,2,3, 2,workload,perturbation (6, 7) ... (default 0-3; 0-5 with --peer).",
    ),
    config: Path | None = typer.Option(
        None, "--config", help="CVF cluster-validation-config ConfigMap (or KEY: value YAML) with thresholds."
    ),
    node: str | None = typer.Option(None, "--node", help="This node's name (DNS-1123); default: the host name."),
    peer: list[str] | None = typer.Option(None, "--peer", help="Partner node for phases 4-5 (repeatable)."),
    out: Path | None = typer.Option(None, "--out", help="Write the snapshot with its phase results (JSON)."),
    node_class: str | None = typer.Option(
        None, "--class", help="Node class, e.g. mi300x-8gpu (default: the class of the snapshot --out replaces)."
    ),
    json_output: bool = typer.Option(False, "--json", help="Print the phase results as JSON on stdout."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (phases, commands, thresholds) only."),
    samples: int | None = typer.Option(
        None, "--samples", help="Repeats of the phase 2/5 sweeps (default UPGRADE_GATE_SAMPLES or 5)."
    ),
    host_root: Path = typer.Option(
        Path("/"), "--host-root", help="Read /sys and /opt under this prefix (e.g. a hostPath mount)."
    ),
    policy_file: Path | None = typer.Option(
        None, "--policy", help="Policy whose bandwidth.regression max_samples bounds re-measuring (default: shipped)."
    ),
    baseline: Path | None = typer.Option(
        None, "--baseline", help="This node's baseline snapshot: re-measure what is inconclusive against it."
    ),
    vendor_name: str = typer.Option(
        "auto",
        "--vendor",
        help="GPU vendor: amd, nvidia or auto (nvidia when nvidia-smi is on PATH and rocminfo is not).",
    ),
) -> ExitCode:
    """Run the CVF phases on this host and record the results (exit 0 only if every phase passed)."""
    from upgrade_gate.collect.capture import check_node_name
    from upgrade_gate.validate.config import default_config, load_cvf_config

    peers = tuple(peer or ())
    numbers = parse_phases(phases) if phases is not None else (ALL_PHASES if peers else frozenset(range(4)))
    if samples is not None and not 1 <= samples <= 1024:
        raise UsageError(f"--samples must be from 1 to 1024, got {samples}")
    if not host_root.is_dir():
        raise UsageError(f"--host-root {host_root}: not a folder")
    from upgrade_gate.validate.pipeline import all_passed

    cfg = load_cvf_config(config) if config is not None else default_config()
    count = samples if samples is not None else cfg.samples
    node_name = check_node_name(node if node is not None else socket.gethostname().lower())
    peer_names = tuple(check_node_name(p) for p in peers)
    if node_name in peer_names:
        raise UsageError(f"--peer {node_name}: a node cannot be its own peer")
    vendor = resolve_vendor(vendor_name)
    if dry_run:
        _print_plan(cfg, numbers, node_name, peer_names, count, vendor)
        return ExitCode.PASS
    resample = _resampling(policy_file, baseline, cfg, node_name, node_class or _class_of(out, node_name))
    node_cls = node_class or _class_of(out, node_name)
    results = _run(cfg, numbers, node_name, peer_names, count, host_root, out, node_cls, resample, vendor)
    if json_output:
        from upgrade_gate import codec

        doc = {
            "node": node_name,
            "passed": all_passed({node_name: results}),
            "phases": [codec.to_jsonable(r) for r in results],
        }
        typer.echo(json_printable(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False)))
    else:
        _print_results(results)
    return ExitCode.PASS if all_passed({node_name: results}) else ExitCode.BLOCK


def _run(
    cfg: CvfConfig,
    numbers: frozenset[int],
    node: str,
    peers: tuple[str, ...],
    samples: int,
    host_root: Path,
    out: Path | None,
    node_class: str | None,
    resample: Resampling,
    vendor: Vendor,
) -> tuple[PhaseResult, ...]:
    from rich.console import Console as RichConsole

    from upgrade_gate.cli.collect_cmds import parser_check
    from upgrade_gate.collect.capture import capture
    from upgrade_gate.collect.probes import probe_catalogue
    from upgrade_gate.collect.runner import LocalRunner
    from upgrade_gate.model import NodeName
    from upgrade_gate.snapshot.build import build_snapshot
    from upgrade_gate.validate.launcher import LocalLauncher
    from upgrade_gate.validate.phases import select_phases
    from upgrade_gate.validate.pipeline import run_pipeline

    err = RichConsole(stderr=True)
    with err.status(f"capturing {node} (every {vendor.title} probe)"):
        probes = probe_catalogue(host_root, vendor=vendor)
        bundle = capture(LocalRunner(), node=node, host_root=host_root, output_check=parser_check(), probes=probes)
        snapshot = build_snapshot(bundle, node_class=node_class)
    renderer = _ProgressRenderer(err)
    try:
        results = run_pipeline(
            [node],
            phases=select_phases(numbers, vendor),
            config=cfg,
            launcher=LocalLauncher({node: None}),
            snapshots={node: snapshot},
            peers=peers,
            samples=samples,
            progress=renderer,
            resampling=resample,
        )[NodeName(node)]
    finally:
        renderer.close()
    if out is not None:
        from upgrade_gate.snapshot.io import CAPTURE_VERSION, write_snapshot

        try:
            write_snapshot(replace(snapshot, phases=results), out, version=CAPTURE_VERSION)
        except OSError as exc:
            raise EnvironmentFailure(f"{out}: cannot write: {exc.strerror or exc}") from exc
        print(f"wrote {out}", file=sys.stderr)
    return results


def _resampling(
    policy_file: Path | None, baseline: Path | None, cfg: CvfConfig, node: str, node_class: str | None
) -> Resampling:
    """Re-measure when inconclusive (validate.remeasure), bounded by the policy; against `baseline` if given."""
    from upgrade_gate.judge.policy import load_policy
    from upgrade_gate.judge.remeasure import resampling
    from upgrade_gate.snapshot.io import load_snapshot

    policy = load_policy(policy_file, cfg)
    if baseline is None:
        return resampling(policy, node_class)
    snap = load_snapshot(baseline)
    if snap.node.name != node:
        raise UsageError(f"--baseline {baseline}: a snapshot of {snap.node.name}, not of {node}")
    return resampling(policy, node_class or snap.node.node_class, baselines={node: snap})


def _class_of(out: Path | None, node: str) -> str | None:
    """The node class of the snapshot `--out` is about to replace (same node), so that it is not lost."""
    if out is None or not out.is_file():
        return None
    from upgrade_gate.errors import GateError
    from upgrade_gate.snapshot.io import load_snapshot

    try:
        previous = load_snapshot(out)
    except (GateError, OSError, ValueError):
        return None  # not a snapshot we can read: it is replaced, there is no class to keep
    if previous.node.name != node or previous.node.node_class is None:
        return None
    print(f"keeping node class {previous.node.node_class} from {out} (--class overrides)", file=sys.stderr)
    return previous.node.node_class


class _ProgressRenderer:
    """Renders pipeline events as rich progress on stderr (one task per running phase)."""

    def __init__(self, console: Console) -> None:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True
        )
        self._tasks: dict[int, TaskID] = {}
        self._progress.start()

    def __call__(self, event: ProgressEvent) -> None:
        if event.kind == "phase-start":
            budget = f" (budget {event.budget_s:g}s)" if event.budget_s is not None else ""
            self._tasks[event.phase] = self._progress.add_task(
                f"phase {event.phase} {event.name}{budget}", total=len(event.nodes)
            )
        elif event.kind == "node-done" and event.phase in self._tasks:
            self._progress.advance(self._tasks[event.phase])
        elif event.kind == "phase-done" and event.phase in self._tasks:
            self._progress.remove_task(self._tasks.pop(event.phase))

    def close(self) -> None:
        """Stop the live display."""
        self._progress.stop()


_STATUS_STYLE = {"passed": "green", "failed": "bold red", "error": "bold red", "skipped": "yellow", "not-run": "dim"}


def _print_results(results: tuple[PhaseResult, ...]) -> None:
    from rich.console import Console as RichConsole
    from rich.text import Text

    console = RichConsole(highlight=False, soft_wrap=True)
    for r in results:
        line = Text(f"phase {r.phase} {r.name:<20} ")
        line.append(f"{r.status.value:<8}", style=_STATUS_STYLE.get(r.status.value, ""))
        if r.duration_s is not None:
            tool = r.tool_duration_s or 0.0
            line.append(f" {r.duration_s:7.2f}s (tools {tool:.2f}s)")
        for key, value in sorted(r.annotations.items()):
            if key.endswith("-measured-bw"):
                line.append(f"  measured {value}")
        console.print(line)
        for reason in r.reasons:
            console.print(Text(one_line(f"    - {reason}")))


def _print_plan(
    cfg: CvfConfig, numbers: frozenset[int], node: str, peers: tuple[str, ...], samples: int, vendor: Vendor
) -> None:
    from upgrade_gate.report.printable import printable
    from upgrade_gate.validate.phases import select_phases

    def _echo(text: str) -> None:  # config values and paths: no terminal escape passes (issue 26)
        typer.echo(printable(text))

    _echo(f"node {node}" + (f", peers {', '.join(peers)}" if peers else "") + f"; config {cfg.source}")
    _echo(f"vendor {vendor.name}: {vendor.title} probes and phases 1-2")
    for phase in select_phases(numbers, vendor):
        label = cfg.label_keys.get(phase.number, phase.label_key) or "(no label)"
        budget = cfg.phase_timeouts_s.get(phase.number) or phase.budget_s(cfg, samples=samples, nodes=1 + len(peers))
        _echo(f"phase {phase.number} {phase.name}  label {label}  budget {budget:g}s")
        if phase.number in cfg.skip:
            flag = cfg.skip_flags.get(phase.number, "SKIP_*")
            _echo(f"  skipped by {flag}=true (recorded as skipped, never passed)")
            continue
        for line in phase.plan(cfg, samples=samples):
            _echo(f"  {line}")
    if cfg.ignored_keys:
        _echo(f"config keys not used by the local pipeline: {', '.join(cfg.ignored_keys)}")
