"""Phase 1 on NVIDIA nodes, GPU hardware acceptance: `dcgmi diag -r 2` (DCGM's medium diagnostic).

The NVIDIA equivalent of CVF's RVS/AGFHC stages (`phases.acceptance`), under the same phase number, name and
label (docs/vendors.md): the command is `vendors.NVIDIA.phase_commands[1]`, read by the `dcgmi-diag` parser.

Design decisions:
- The phase passes only when dcgmi exited 0 AND its table was read whole AND no test failed, warned or
  skipped AND every GPU of the snapshot has a result in every test AND the Metadata names the snapshot's
  driver and one device id per GPU. A `Fail` result or an `Error` row (DCGM's deployment errors, "row
  remappings are pending") fails it, naming the test, its GPUs and the message.
- `Warn` fails the phase too, naming the test, its GPUs and DCGM's warning ("GPU 3 ECC DBE count 12 exceeds
  threshold 0"). Why not a warning the verdict shows: the judge reads a phase's status only (its
  annotations are "already judged", `judge.coverage`), so a passed phase's warning never reached the gate
  (brk15 #10). A DCGM warning is a test finding the GPU outside a threshold; on a canary that is a reason to
  stop the rollout until someone looks, not to promote the node. (`dcgm-warnings` still names the tests.)
- `Skip` is no pass: every test `dcgmi diag -r 2` prints is one its level runs, so a skipped one is evidence
  missing (`error`, naming the test and GPUs), as is a table without the level's tests: the Deployment
  checks, PCIe and GPU Memory (DCGM 3.x names; 4.x prints `pcie`, `memory`).
- Every GPU of the node's snapshot must have a result in every test (`- All`, `- GPU: 0, 1`, 4.x's
  `GPU0: Pass`); a GPU without one, a result for a GPU the snapshot lacks, or a device id count other than
  the snapshot's GPU count is an `error`: the diagnostic did not test the node the snapshot describes.
- A missing dcgmi, a timeout, or output the parser refuses (a cut table, `Error: ...`, a host engine that
  is not running) is an `error`: missing evidence, never a pass. So is a table without its Metadata (no
  driver, no device ids) and a run without a snapshot to check them against.
- The diagnostic's detected driver is cross-checked with the snapshot's: a disagreement (the diag ran
  against another driver than the one captured) fails the phase.
- Level 2 runs in minutes; the budget is DCGM's documented "a few minutes" with CVF's 120 s slack.
"""

from __future__ import annotations

from collections.abc import Iterable

from upgrade_gate.errors import ParseError
from upgrade_gate.model import PhaseResult, Snapshot
from upgrade_gate.parse.dcgmi import DcgmDiag, DcgmTest, parse_dcgmi_diag
from upgrade_gate.validate import cvf
from upgrade_gate.validate.config import CvfConfig
from upgrade_gate.validate.phase import Outcome, PhaseContext
from upgrade_gate.vendors import NVIDIA

ARGV = NVIDIA.phase_commands[1]
TIMEOUT_S = 600.0


LEVEL_TESTS = (("PCIe", frozenset({"pcie"})), ("GPU Memory", frozenset({"gpu memory", "memory"})))
"""The tests `-r 2` adds to level 1's Deployment checks, by their DCGM 3.x name and the names 3.x/4.x print."""


def _gpus(gpus: Iterable[int] | None) -> str:
    return "all GPUs" if gpus is None else "GPU " + ", ".join(str(g) for g in sorted(set(gpus)))


def _label(test: DcgmTest) -> str:
    return test.name or f"{test.category} section"


def _describe(test: DcgmTest) -> str:
    gpus = sorted({g for r in test.results if r.status == "Fail" for g in (r.gpus or ())})
    where = f" on GPU {', '.join(str(g) for g in gpus)}" if gpus else ""
    why = "; ".join(test.errors) or next((w for w in test.warnings), "")
    return f"{_label(test)} failed{where}" + (f": {why}" if why else "")


def _warned(diag: DcgmDiag) -> tuple[DcgmTest, ...]:
    """Tests (or sections) with a Warn result or a Warning message, that did not fail outright."""
    failed = set(diag.failed)
    return tuple(
        t for t in diag.tests if t not in failed and (t.warnings or any(r.status == "Warn" for r in t.results))
    )


def _on(test: DcgmTest, status: str) -> str:
    """The GPUs of `test`'s results with `status`: "all GPUs" or "GPU 3, 4" ("" when none has it)."""
    lists = [r.gpus for r in test.results if r.status == status]
    if not lists:
        return ""
    return "all GPUs" if any(g is None for g in lists) else _gpus(g for gpus in lists for g in gpus or ())


def _warning(test: DcgmTest) -> str:
    on = _on(test, "Warn")
    why = "; ".join(test.warnings) or "no warning text printed"
    return f"{_label(test)} warned{' on ' + on if on else ''}: {why}"


def _check_metadata(diag: DcgmDiag, snapshot: Snapshot | None, out: Outcome, where: str) -> int | None:
    """The driver cross-check and the GPU count; the number of GPUs every test must cover (None: unknown)."""
    if not diag.metadata and diag.form == "text":
        out.error(
            f"{where}: no Metadata section (DCGM Version, Driver Version Detected, GPU Device IDs Detected): "
            "the driver the diagnostic ran against and the GPUs it saw cannot be checked"
        )
    else:
        if not diag.driver_version:
            out.error(f"{where}: no 'Driver Version Detected': the driver the diagnostic ran against cannot be checked")
        if not diag.device_ids:
            out.error(f"{where}: no 'GPU Device IDs Detected': the GPUs the diagnostic saw cannot be counted")
    if snapshot is None:
        out.error(f"{where}: no snapshot of the node: the diagnostic's driver and GPUs cannot be checked against it")
        return None
    captured = snapshot.software.driver_version
    if not captured:
        out.error(f"{where}: the snapshot has no driver version to check the diagnostic's driver against")
    elif diag.driver_version and diag.driver_version != captured:
        out.fail(f"{where}: ran against driver {diag.driver_version}, the snapshot captured {captured}")
    count = len(snapshot.gpus)
    if count == 0:
        out.error(f"{where}: the snapshot lists no GPU: the diagnostic's GPUs cannot be checked against it")
        return None
    if diag.device_ids and len(diag.device_ids) != count:
        out.error(
            f"{where}: detected {len(diag.device_ids)} GPU device id(s) for the snapshot's {count} GPUs: "
            "the diagnostic did not see every GPU of the node"
        )
    return count


def _check_coverage(diag: DcgmDiag, count: int | None, out: Outcome, where: str) -> None:
    """Every level-2 test present, none skipped, and every GPU with a result in every test."""
    named = [t for t in diag.tests if t.name]
    if not named:
        out.error(f"{where}: no test result in the table: the diagnostic ran nothing")
        return
    if not any(t.category == "Deployment" for t in named):
        out.error(f"{where}: no Deployment test result: `-r 2` runs level 1's deployment checks")
    for shown, names in LEVEL_TESTS:
        if not any(t.name.lower() in names for t in named):
            out.error(f"{where}: no {shown} result: `-r 2` runs it, a table without it is no pass")
    for test in named:
        skipped = _on(test, "Skip")
        if skipped:
            out.error(
                f"{where}: {test.name} skipped on {skipped}: a test the run level includes that did not run is no pass"
            )
        if count is None:
            continue
        seen = {g for r in test.results for g in r.gpus or ()}
        missing = [] if any(r.gpus is None for r in test.results) else sorted(set(range(count)) - seen)
        extra = sorted(seen - set(range(count)))
        if missing:
            out.error(f"{where}: {test.name} has no result for {_gpus(missing)} of the snapshot's {count} GPUs")
        if extra:
            out.error(f"{where}: {test.name} has a result for {_gpus(extra)}, which the snapshot's {count} GPUs lack")


class DcgmAcceptancePhase:
    """Phase 1 of an NVIDIA node."""

    number = 1
    name = cvf.PHASE_NAMES[1]
    label_key: str | None = cvf.GPU_HW_ACCEPTANCE

    def run(self, ctx: PhaseContext) -> PhaseResult:
        """Run the diagnostic once and judge its table."""
        out = Outcome()
        result = ctx.runner().run(ARGV, timeout=TIMEOUT_S)
        where = " ".join(ARGV)
        if result.missing or result.timed_out:
            out.error(f"{where}: {result.failure_reason()}")
            return out.result(self, ctx.config)
        try:
            diag: DcgmDiag = parse_dcgmi_diag(result.stdout)
        except ParseError as exc:
            out.error(f"{where}: unreadable output: {exc}")
            return out.result(self, ctx.config)
        for test in diag.failed:
            out.fail(f"{where}: {_describe(test)}")
        warned = _warned(diag)
        for test in warned:
            out.fail(f"{where}: {_warning(test)}")
        if result.returncode != 0 and not out.failures:
            out.fail(f"{where}: {result.failure_reason()} although no test failed")
        count = _check_metadata(diag, ctx.snapshot, out, where)
        _check_coverage(diag, count, out, where)
        extra = {"dcgm-version": diag.dcgm_version or "unknown"}
        if warned:
            extra["dcgm-warnings"] = ", ".join(_label(t) for t in warned)
        return out.result(self, ctx.config, extra=extra)

    def budget_s(self, config: CvfConfig, *, samples: int, nodes: int) -> float:
        """The diagnostic's timeout plus CVF's 120 s slack per stage."""
        return TIMEOUT_S + 120.0

    def plan(self, config: CvfConfig, *, samples: int) -> tuple[str, ...]:
        """Dry-run description."""
        return (
            f"{' '.join(ARGV)}, timeout {TIMEOUT_S:g}s; any Fail or Warn result or Error row fails the node; a "
            "skipped test, a GPU without a result or a table without its Metadata is an error",
        )
