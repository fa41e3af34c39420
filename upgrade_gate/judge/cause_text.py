"""Words and small tables for cause headlines: sizes, drops, the GPU permutation, owners by rule.

Pure helpers of `judge.causes`, kept apart so that the grouping logic reads on its own.

Design decisions:
- Owners come from the shipped checklists (the incident's table has an owner column): a rule's owner is
  the owner of the first shipped checklist item that lists it, canary items first. One vocabulary, read
  from the data, never a second hand-kept list; a rule no item lists falls back to "platform on-call".
- The permutation table is horizontal (an `index` / `was` / `now` row each), BDFs without the `0000:`
  domain, at most `PERMUTATION_COLUMNS` GPUs per block, so an 8-GPU node takes three lines of under
  90 characters and a 64-partition node stays within 120.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from upgrade_gate.model import CauseCategory, Gpu, RuleId
from upgrade_gate.parse.bdf import address_of

DEFAULT_OWNER = "platform on-call"
PERMUTATION_COLUMNS = 10

_CATEGORY_BY_PREFIX: tuple[tuple[str, CauseCategory], ...] = (
    ("device.", CauseCategory.HARDWARE),
    ("identity.", CauseCategory.EVIDENCE),
    ("xgmi.", CauseCategory.HARDWARE),
    ("pcie.", CauseCategory.HARDWARE),
    ("dmesg.", CauseCategory.HARDWARE),
    ("thermal.", CauseCategory.HARDWARE),
    ("phase.", CauseCategory.HARDWARE),
    ("firmware.", CauseCategory.FIRMWARE),
    ("vbios.", CauseCategory.FIRMWARE),
    ("software.", CauseCategory.DRIVER),
    ("abi.", CauseCategory.DRIVER),
    ("library.", CauseCategory.DRIVER),
    ("nic.firmware", CauseCategory.FIRMWARE),
    ("nic.", CauseCategory.FABRIC),
    ("sriov.", CauseCategory.CONFIGURATION),
    ("bandwidth.", CauseCategory.DRIVER),
    ("metric.", CauseCategory.DRIVER),
    ("evidence.", CauseCategory.EVIDENCE),
    ("checklist.", CauseCategory.CONFIGURATION),
    ("fleet.", CauseCategory.CONFIGURATION),
)


def category_of(rule: str) -> CauseCategory:
    """The category a lone finding of `rule` falls in."""
    return next((cat for prefix, cat in _CATEGORY_BY_PREFIX if rule.startswith(prefix)), CauseCategory.CONFIGURATION)


@functools.cache
def _owners() -> dict[str, str]:
    from upgrade_gate.judge.checklist import SHIPPED, load_checklist

    out: dict[str, str] = {}
    for name in sorted(SHIPPED, key=lambda n: n != "canary"):
        for item in load_checklist(name).items:
            for rule in item.rules:
                out.setdefault(rule, item.owner)
    return out


def owner_of(rule: RuleId | str) -> str:
    """Who acts on a finding of `rule`, in the checklists' words."""
    return _owners().get(str(rule), DEFAULT_OWNER)


def size_text(n: int) -> str:
    """1024 -> "1 KiB", 2147483648 -> "2 GiB", 1000 -> "1000 B"."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def drop_text(drops: Sequence[float]) -> str:
    """ "-20%" (the median drop) when uniform, "-15% (-11% to -17%)" when spread (0.2 = 20% worse)."""
    if not drops:
        return "worse"
    ordered = sorted(drops)
    median = ordered[len(ordered) // 2]
    if ordered[-1] - ordered[0] <= 0.05:
        return f"-{median:.0%}"
    return f"-{median:.0%} (-{ordered[0]:.0%} to -{ordered[-1]:.0%})"


def short_bdf(bdf: object) -> str:
    """ "0000:05:00.0" -> "05:00.0" (domain 0 dropped), anything else as is, None as "-"."""
    if bdf is None:
        return "-"
    address = address_of(str(bdf))
    return address.display if address is not None else str(bdf)


def permutation_table(before: Sequence[object], after: Sequence[object]) -> tuple[str, ...]:
    """Rows `index` / `was` / `now` (BDF per index in the baseline and now), in blocks of ten GPUs."""
    count = max(len(before), len(after))
    cells = [
        (str(i), short_bdf(before[i] if i < len(before) else None), short_bdf(after[i] if i < len(after) else None))
        for i in range(count)
    ]
    lines: list[str] = []
    for start in range(0, count, PERMUTATION_COLUMNS):
        block = cells[start : start + PERMUTATION_COLUMNS]
        width = max(len(text) for cell in block for text in cell)
        for row, label in enumerate(("index", "was", "now")):
            marks = "".join(f"  {cell[row]:<{width}}" for cell in block)
            lines.append(f"{label:<5}{marks}".rstrip())
    return tuple(lines)


def moved_summary(before: Sequence[object], after: Sequence[object]) -> str:
    """ "8 of 8 indices moved (reversed)" and the like."""
    moved = sum(1 for a, b in zip(before, after, strict=False) if a != b)
    text = f"{moved} of {len(before)} indices moved"
    if len(before) > 1 and list(after) == list(reversed(before)):
        text += " (reversed)"
    return text


def plural(count: int, word: str) -> str:
    """ "1 finding", "3 findings"."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def gpu_text(gpu: Gpu) -> str:
    """ "GPU 3 (0000:75:00.0, serial 692409006560)": index, BDF and board serial (or unique id, so named:
    a GPU whose serial is unreported was labelled "serial GPU-..." with its UUID, 2026-12-07)."""
    ident = f"serial {gpu.serial}" if gpu.serial else f"unique id {gpu.unique_id}" if gpu.unique_id else None
    parts = [str(gpu.bdf) if gpu.bdf is not None else "no BDF"] + ([ident] if ident else [])
    return f"GPU {gpu.index} ({', '.join(parts)})"


def devices_text(gpus: Sequence[Gpu], total: int) -> str:
    """ " on GPU 3 (...)", " on GPUs 1 (...), 4 (...)", " on all 8 GPUs", " on 5 of 8 GPUs: GPU 0 (...), ..."."""
    if not gpus:
        return ""
    if len(gpus) == 1:
        return f" on {gpu_text(gpus[0])}"
    if total and len(gpus) >= total:
        return f" on all {total} GPUs"
    shown = ", ".join(gpu_text(g) for g in gpus[:3]) + (f" and {len(gpus) - 3} more" if len(gpus) > 3 else "")
    return f" on {len(gpus)}{f' of {total}' if total else ''} GPUs: {shown}"
