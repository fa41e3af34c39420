"""Result types of the rccl-tests / nccl-tests parser, shared by its text and `-Z json` readers.

Split out of `rccl_tests` (2026) so the JSON reader (`rccl_tests_json`) and the text parser can both
build these without importing each other; `rccl_tests` re-exports every name here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from upgrade_gate.model import Bdf

TOOL = "rccl-tests"

IN_PLACE_UNCHECKED = frozenset({"alltoall", "alltoallv", "sendrecv"})
"""Collectives whose test never checks its in-place half (`args->reportErrors = in_place ? 0 : 1` in
nccl-tests and rccl-tests src/alltoall.cu, alltoallv.cu, sendrecv.cu): `#wrong` N/A there is the format."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepSettings:
    """The `# nThread ... graph: 0` header: what was swept and how."""

    n_threads: int
    n_gpus: int  # GPUs per thread (-g)
    min_bytes: int
    max_bytes: int
    step: int
    step_kind: str  # "factor" / "bytes"
    warmup_iters: int
    iters: int
    agg_iters: int | None = None  # absent in old nccl-tests
    validation: int | None = None
    graph: int | None = None
    max_bytes_reduced_to: int | None = None  # "# Reducing maxBytes to N due to memory limitation"


@dataclass(frozen=True, slots=True, kw_only=True)
class RcclDevice:
    """One `#  Rank  N [Group G] Pid P on HOST device D [BUS] NAME` line."""

    rank: int
    group: int | None
    pid: int
    host: str
    device: int
    bus_id: str  # as printed
    bdf: Bdf | None  # None where the tool printed no PCI address (old nccl-tests "[0x00]")
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RcclSample:
    """One half (out-of-place or in-place) of a result row."""

    time_us: float
    algbw_gbs: float
    busbw_gbs: float
    wrong: int | None = None  # "#wrong"; None when printed N/A (validation off)
    max_error: float | None = None  # old nccl-tests "error" column
    flagged: bool = False  # value printed with "*": errors over the threshold


@dataclass(frozen=True, slots=True, kw_only=True)
class RcclRow:
    """One message size of the results table."""

    size: int
    count: int | None
    type: str
    redop: str
    root: int | None
    out_of_place: RcclSample | None
    in_place: RcclSample | None
    cycle: int = 0
    line_no: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RcclTestsResult:
    """A whole rccl-tests run: sweep settings, ranks, rows and the footer."""

    source_format: str  # "text", "json" or "text+json"
    settings: SweepSettings | None  # None for a JSON-only result
    rows: tuple[RcclRow, ...]
    devices: tuple[RcclDevice, ...] = ()
    ranks: int | None = None
    tests_version: str | None = None
    collective: str | None = None
    versions: dict[str, str] = field(default_factory=dict)  # "RCCL version", "HIP version", ...
    out_of_bounds: int | None = None
    out_of_bounds_ok: bool | None = None
    avg_busbw_gbs: float | None = None
    avg_busbw_verdict: str | None = None  # "OK"/"FAILED" when NCCL_TESTS_MIN_BW was set

    @property
    def skips_in_place_check(self) -> bool:
        """The printed collective (`alltoall_perf`, ...) is one whose in-place half is never checked."""
        name = self.collective.rsplit("/", 1)[-1].removesuffix("_perf") if self.collective else None
        return name in IN_PLACE_UNCHECKED

    @property
    def wrong_total(self) -> int | None:
        """Sum of #wrong over every row and half; None when no value was validated."""
        vals = [s.wrong for r in self.rows for s in (r.out_of_place, r.in_place) if s and s.wrong is not None]
        return sum(vals) if vals else None
