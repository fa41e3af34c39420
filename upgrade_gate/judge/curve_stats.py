"""The numeric pieces of `judge.curves`: metric groups, NaN-padded sample arrays, per-row medians and
deviations (numpy over metrics x samples; np.median/nanmedian are slow on many small rows), and the
relative <-> log conversions. No decisions here: those are `curves.assess`'s.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Sequence

import numpy as np

_SIZE = re.compile(r"^(?P<prefix>.+)/\d+$")
_RAIL = re.compile(r"^rail/[^/]+/(?P<metric>[^/]+)$")


@functools.lru_cache(maxsize=4096)
def group_of(key: str) -> str:
    """`mesh/all_reduce/busbw/1024` -> `mesh/all_reduce/busbw`; `rail/x/write_bw` -> `rail/*/write_bw`."""
    m = _SIZE.match(key)
    if m:
        return m.group("prefix")
    m = _RAIL.match(key)
    if m:
        return f"rail/*/{m.group('metric')}"
    return key


def rel(log_drop: float) -> float:
    """A log drop as a relative one (0.1 = 10% worse)."""
    return 1.0 - math.exp(-log_drop)


def log_tol(tol: float) -> float:
    """A relative tolerance as a log drop."""
    return -math.log1p(-min(tol, 0.999))


def padded(rows: Sequence[Sequence[float]]) -> np.ndarray:
    """Rows of samples as a metrics x samples array, NaN-padded where a row is shorter."""
    lengths = set(map(len, rows))
    width = max(lengths)
    if len(lengths) == 1:  # the usual case: fromiter over the chained rows is ~2x np.array(rows)
        return np.fromiter(itertools.chain.from_iterable(rows), float, len(rows) * width).reshape(len(rows), width)
    out = np.full((len(rows), width), np.nan)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def logged(x: np.ndarray, floor: float) -> np.ndarray:
    """log(max(x, floor)), NaN padding kept."""
    with np.errstate(invalid="ignore"):
        out: np.ndarray = np.log(np.maximum(x, floor))
    return out


def row_median(x: np.ndarray, *, full: bool = False) -> np.ndarray:
    """Median per row of a NaN-padded array (sorted once; np.median/nanmedian are slow on small rows).
    `full`: the caller knows there is no NaN (every row has `x.shape[1]` values): not counted again."""
    ordered = np.sort(x, axis=1)  # NaNs sort last
    n = np.full(1, x.shape[1]) if full else x.shape[1] - np.count_nonzero(np.isnan(x), axis=1)
    if n.min() == n.max():
        k = int(n[0])
        if k == 0:
            return np.full(len(x), np.nan)
        same: np.ndarray = (ordered[:, (k - 1) // 2] + ordered[:, k // 2]) / 2.0
        return same
    rows = np.arange(len(x))
    lo = np.maximum((n - 1) // 2, 0)
    hi = np.maximum(n // 2, 0)
    out: np.ndarray = np.where(n > 0, (ordered[rows, lo] + ordered[rows, hi]) / 2.0, np.nan)
    return out


def sum_sq_dev(x: np.ndarray, *, full: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Per row: deviations from the row mean (NaN-padded rows), and degrees of freedom. `full`: the caller
    knows there is no NaN; then the sums are plain ones (`nansum` sums the same values in the same order
    after copying the array to zero its NaNs, so the results are the same bits)."""
    if full:
        width = x.shape[1]
        dev = x - (np.sum(x, axis=1) / max(width, 1))[:, None]
        return dev, np.full(len(x), max(width - 1, 0))
    n = np.sum(~np.isnan(x), axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        dev = x - (np.nansum(x, axis=1) / np.maximum(n, 1))[:, None]
    return dev, np.maximum(n - 1, 0)
