"""Host rules: BIOS, kernel command line, OS release and the RCCL library against the baseline.

The incident names these as causes (a BIOS update re-enumerates PCIe; kernel parameters such as
`iommu=pt` or `amdgpu.*` change DMA and reset behaviour), yet nothing recorded them. Design decisions:
- Any difference from the baseline blocks unless a plan `accept` entry covers its path
  (`host.bios_version`, `host.kernel_cmdline`, `software.rccl_library`, ...): a BIOS update is planned
  work, so the plan says so. A value that was readable and no longer is blocks too (evidence vanished),
  with the recorded reason; one that appears where the baseline had none is a change like any other.
- The kernel command line is recorded without `BOOT_IMAGE=` and `initrd=` (snapshot.host): the boot
  loader writes the kernel image's path there, which moves with every kernel update (`software.kernel`
  judges that). The rule compares exactly what `diff` compares, so the two never disagree.
- The RCCL library ships with ROCm: a plan that changes ROCm explains its change (as it does for
  amd-smi and HIP); without one, a new librccl blocks. Fail closed either way: a value that is not a
  librccl.so file name (an error text, `N/A`, a path) blocks, and so does, under a ROCm change, a
  library the baseline had and the candidate lost. One that stays the same file while the node's ROCm
  version moves warns (one step below the rule's severity): ROCm names the file after its release
  (librccl.so.1.0.60200 for 6.2.0), so the node probably still loads the old RCCL (a stale /opt/rocm
  link, a library path pinned elsewhere), yet a site may pin its own RCCL build on purpose.
- A baseline saved before upgrade-gate captured host facts (`host.captured` false) cannot say what
  the host was: one warning per rule asks for a new baseline instead of blocking every node at once.
  When neither side captured them there is nothing to compare (a bundle that lacks the probes is
  already `evidence.missing`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from upgrade_gate.judge.rules.base import NodeContext, finding, show, softer, spec
from upgrade_gate.judge.rules.facts import comparable_cmdline
from upgrade_gate.model import Finding, Host
from upgrade_gate.parse.common import RCCL_FILE_RE

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry

_BIOS = (("bios_vendor", "BIOS vendor"), ("bios_version", "BIOS version"), ("bios_date", "BIOS date"))
_OS = (("os_id", "OS"), ("os_version_id", "OS version"), ("os_pretty_name", "OS release"))
_SHOWN = 80  # characters of a garbled value a message quotes


def _host_fields(
    ctx: NodeContext, entry: RuleEntry, fields: tuple[tuple[str, str], ...], probe: str
) -> Iterable[Finding]:
    if ctx.baseline is None:
        return
    before_host, after_host = ctx.baseline.host, ctx.candidate.host
    if not before_host.captured and not after_host.captured:
        return  # neither snapshot has host facts; a bundle that lacks the probes is evidence.missing's
    if not before_host.captured:
        yield finding(
            ctx,
            entry,
            f"the baseline predates host facts ({probe} was not captured): re-baseline to judge "
            + ", ".join(label for _, label in fields),
            path=f"host.{fields[0][0]}",
            expected="a baseline with host facts",
            actual=None,
            evidence=probe,
            severity=softer(entry.severity),
        )
        return
    for name, label in fields:
        before, after = _value(before_host, name), _value(after_host, name)
        if before == after:
            continue
        if after is None:
            why = after_host.na_reasons.get(name, "no probe reported it")
            message = f"{label} was {before}, now unknown ({why})"
        else:
            message = f"{label} changed outside the plan: {show(before)} -> {show(after)}"
        yield finding(
            ctx,
            entry,
            message,
            path=f"host.{name}",
            expected=getattr(before_host, name),
            actual=getattr(after_host, name),
            evidence=probe,
        )


def _value(host: Host, name: str) -> str | None:
    value: str | None = getattr(host, name)
    return comparable_cmdline(value) if name == "kernel_cmdline" else value


def check_bios(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """BIOS vendor, version and date vs the baseline."""
    return _host_fields(ctx, entry, _BIOS, "bios")


def check_kernel_cmdline(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Kernel command line (recorded without the boot loader's image path) vs the baseline."""
    return _host_fields(ctx, entry, (("kernel_cmdline", "kernel command line"),), "kernel_cmdline")


def check_os_release(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """OS ID, VERSION_ID and PRETTY_NAME vs the baseline."""
    return _host_fields(ctx, entry, _OS, "os_release")


def check_rccl(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """The RCCL library file vs the baseline, unless the plan changes ROCm (RCCL ships with it); never garbled."""
    if ctx.baseline is None:
        return
    before, after = ctx.baseline.software.rccl_library, ctx.candidate.software.rccl_library
    if after is not None and RCCL_FILE_RE.fullmatch(after) is None:
        shown = after if len(after) <= _SHOWN else after[: _SHOWN - 3] + "..."
        yield finding(
            ctx,
            entry,
            f"RCCL library reads {shown!r}, not a librccl.so file name",
            path="software.rccl_library",
            expected=before if before is not None else "a librccl.so file name",
            actual=after,
            evidence="rccl_library",
        )
        return
    if ctx.plan is not None and ctx.plan.change.rocm is not None:
        yield from _rccl_with_rocm(ctx, entry, (before, after), ctx.baseline.software.rocm_version)
        return
    if before == after:
        return
    if before is None and "rccl_library" not in ctx.baseline.software.na_reasons:
        return  # a baseline saved before the RCCL library was captured: nothing to compare with
    if after is None:
        why = ctx.candidate.software.na_reasons.get("rccl_library", "no probe reported it")
        message = f"RCCL library was {before}, now unknown ({why})"
    else:
        message = f"RCCL library changed outside the plan: {show(before)} -> {show(after)}"
    yield finding(
        ctx,
        entry,
        message,
        path="software.rccl_library",
        expected=before,
        actual=after,
        evidence="rccl_library",
    )


def _rccl_with_rocm(
    ctx: NodeContext, entry: RuleEntry, library: tuple[str | None, str | None], was: str | None
) -> Iterable[Finding]:
    """Under a planned ROCm change (from ROCm `was`): a new RCCL file is explained; a lost one blocks, the same
    one warns."""
    before, after = library
    if before is None or (after is not None and after != before):
        return  # no baseline library to compare with, or the new release's
    now = ctx.candidate.software.rocm_version
    if after is None:
        why = ctx.candidate.software.na_reasons.get("rccl_library", "no probe reported it")
        yield finding(
            ctx,
            entry,
            f"RCCL library was {before}, now unknown ({why}) after the planned ROCm change",
            path="software.rccl_library",
            expected=before,
            actual=None,
            evidence="rccl_library",
        )
    elif was is None or was != now:
        yield finding(
            ctx,
            entry,
            f"RCCL library is still {before} while ROCm moved {show(was)} -> {show(now)}: the node may still "
            "load the old RCCL",
            path="software.rccl_library",
            expected=f"the RCCL library of ROCm {show(now)}",
            actual=after,
            evidence="rccl_library",
            severity=softer(entry.severity),
            hint="check where /opt/rocm/lib/librccl.so.1 resolves to (readlink -f) and the /opt/rocm link",
        )


SPECS = (
    spec("host.bios", "host BIOS vendor, version or date changed outside the plan", check_bios, needs_baseline=True),
    spec(
        "host.kernel_cmdline",
        "kernel command line changed outside the plan",
        check_kernel_cmdline,
        needs_baseline=True,
    ),
    spec("host.os_release", "OS release changed outside the plan", check_os_release, needs_baseline=True),
    spec("software.rccl", "RCCL library changed without a ROCm change in the plan", check_rccl, needs_baseline=True),
)
