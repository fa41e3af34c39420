"""Shortcuts in the judge's statistics compute the same bits as the general path (issue 29): the plain
sums `sum_sq_dev` takes when every value is finite, and the floor test given its logs by the caller."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from upgrade_gate.judge import curves
from upgrade_gate.judge.curve_stats import sum_sq_dev
from upgrade_gate.validate.remeasure import Resampling

FINITE = st.floats(min_value=-30.0, max_value=30.0, allow_nan=False, allow_infinity=False)


@st.composite
def tables(draw: st.DrawFn) -> np.ndarray:
    rows = draw(st.integers(min_value=1, max_value=12))
    width = draw(st.integers(min_value=1, max_value=9))
    values = draw(st.lists(FINITE, min_size=rows * width, max_size=rows * width))
    return np.array(values, dtype=float).reshape(rows, width)


@settings(max_examples=300, deadline=None)
@given(tables())
def test_sum_sq_dev_plain_sums_are_the_nan_aware_ones_bit_for_bit(x: np.ndarray) -> None:
    dev, dof = sum_sq_dev(x)
    fast_dev, fast_dof = sum_sq_dev(x, full=True)
    assert dev.tobytes() == fast_dev.tobytes()
    assert dof.tolist() == fast_dof.tolist()
    assert np.nansum(dev * dev, axis=1).tobytes() == np.sum(fast_dev * fast_dev, axis=1).tobytes()
    assert (dev**2).tobytes() == (dev * dev).tobytes()


SAMPLE = st.floats(min_value=0.0, max_value=1e4, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(SAMPLE, min_size=1, max_size=8), min_size=1, max_size=8),
    st.floats(min_value=0.5, max_value=1e4),
    st.integers(min_value=1, max_value=20),
)
def test_floor_test_with_the_callers_logs_is_the_floor_test(rails: list[list[float]], floor: float, tests: int) -> None:
    p = Resampling(max_samples=10)
    logs = [curves.log_samples(r, p) for r in rails]
    assert curves.pooled_log_sigma(logs, p) == curves.pooled_sigma(rails, p)
    sigma = curves.pooled_sigma(rails, p)
    for samples, logged in zip(rails, logs, strict=True):
        plain = curves.floor_check(samples, floor, sigma=sigma, tests=tests, p=p)
        given_logs = curves.floor_check(samples, floor, sigma=sigma, tests=tests, p=p, logs=logged)
        assert plain == given_logs
        assert all(math.isfinite(v) for v in (plain.estimate, plain.low, plain.high))
