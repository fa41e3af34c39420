"""Phase 1 on NVIDIA nodes, GPU hardware acceptance: `dcgmi diag -r 2` (DCGM's medium diagnostic).

The NVIDIA equivalent of CVF's RVS/AGFHC stages (`phases.acceptance`), under the same phase number, name and
label (docs/vendors.md): the command is `vendors.NVIDIA.phase_commands[1]`, read by the `dcgmi-diag` parser.

Design decisions:
- The phase passes only when dcgmi exited 0 AND its table was read whole AND no test failed: a `Fail`
  result or an `Error` row (DCGM's deployment errors, "row remappings are pending") fails it, naming the
  test, its GPUs and the message. `Warn` results pass and are annotated (`dcgm-warnings`), like CVF keeps
  warnings out of its verdict; `Skip` results pass (DCGM skips what the GPU lacks).
- A missing dcgmi, a timeout, or output the parser refuses (a cut table, `Error: ...`, a host engine that
  is not running) is an `error`: missing evidence, never a pass.
- The diagnostic's detected driver is cross-checked with the snapshot's: a disagreement (the diag ran
  against another driver than the one captured) fails the phase.
- Level 2 runs in minutes; the budget is DCGM's documented "a few minutes" with CVF's 120 s slack.
"""

from __future__ import annotations

from upgrade_gate.errors import ParseError
from upgrade_gate.model import PhaseResult
from upgrade_gate.parse.dcgmi import DcgmDiag, DcgmTest, parse_dcgmi_diag
from upgrade_gate.validate import cvf
from upgrade_gate.validate.config import CvfConfig
from upgrade_gate.validate.phase import Outcome, PhaseContext
from upgrade_gate.vendors import NVIDIA

ARGV = NVIDIA.phase_commands[1]
TIMEOUT_S = 600.0


def _describe(test: DcgmTest) -> str:
    gpus = sorted({g for r in test.results if r.status == "Fail" for g in (r.gpus or ())})
    where = f" on GPU {', '.join(str(g) for g in gpus)}" if gpus else ""
    why = "; ".join(test.errors) or next((w for w in test.warnings), "")
    name = test.name or f"{test.category} section"
    return f"{name} failed{where}" + (f": {why}" if why else "")


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
        if result.returncode != 0 and not diag.failed:
            out.fail(f"{where}: {result.failure_reason()} although no test failed")
        captured = ctx.snapshot.software.driver_version if ctx.snapshot is not None else None
        if diag.driver_version and captured and diag.driver_version != captured:
            out.fail(f"{where}: ran against driver {diag.driver_version}, the snapshot captured {captured}")
        warned = [t.name for t in diag.tests if any(r.status == "Warn" for r in t.results)]
        extra = {"dcgm-version": diag.dcgm_version or "unknown"}
        if warned:
            extra["dcgm-warnings"] = ", ".join(warned)
        return out.result(self, ctx.config, extra=extra)

    def budget_s(self, config: CvfConfig, *, samples: int, nodes: int) -> float:
        """The diagnostic's timeout plus CVF's 120 s slack per stage."""
        return TIMEOUT_S + 120.0

    def plan(self, config: CvfConfig, *, samples: int) -> tuple[str, ...]:
        """Dry-run description."""
        return (f"{' '.join(ARGV)}, timeout {TIMEOUT_S:g}s; any Fail result or Error row fails the node",)
