"""Property tests of the helpers every parser shares (parse.common).

The parsers themselves are property-tested on mutated recorded outputs by tests/test_parse_corpus.py,
driven by the parser registry.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from upgrade_gate.errors import ParseError
from upgrade_gate.parse.common import is_na, normalize_bdf, strip_ansi

# --------------------------------------------------------------------------- shared helpers (parse.common)


@settings(max_examples=200, deadline=None)
@given(domain=st.integers(0, 0xFFFF), bus=st.integers(0, 0xFF), dev=st.integers(0, 0x1F), fn=st.integers(0, 7))
def test_common_normalize_bdf_round_trips_any_address(domain: int, bus: int, dev: int, fn: int) -> None:
    canonical = f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"
    assert normalize_bdf(canonical.upper(), tool="t", line_no=1) == canonical
    short = normalize_bdf(f"{bus:02X}:{dev:02x}.{fn}", tool="t", line_no=1, allow_missing_domain=True)
    assert short == f"0000:{bus:02x}:{dev:02x}.{fn}"


@settings(max_examples=200, deadline=None)
@given(raw=st.text(max_size=20))
def test_common_normalize_bdf_only_raises_parse_error(raw: str) -> None:
    with contextlib.suppress(ParseError):
        bdf = normalize_bdf(raw, tool="t", line_no=3, allow_missing_domain=True, allow_missing_function=True)
        assert bdf == bdf.lower()


@pytest.mark.parametrize(
    ("raw", "kwargs", "message"),
    [
        ("05:00.0", {}, "without a domain"),
        ("0000:05:00", {}, "without a function"),
        ("0000:05:20.0", {}, "above 0x1f"),
        ("0000:05:00.8", {}, "not a PCI address"),
        ("GPU-07386a321fa45d1e", {}, "not a PCI address"),
    ],
)
def test_common_normalize_bdf_rejects_forms_the_caller_did_not_allow(
    raw: str, kwargs: dict[str, bool], message: str
) -> None:
    with pytest.raises(ParseError, match=message) as info:
        normalize_bdf(raw, tool="rccl-tests", line_no=7, **kwargs)
    assert (info.value.tool, info.value.line_no) == ("rccl-tests", 7)


def test_common_normalize_bdf_accepts_short_forms_when_allowed() -> None:
    assert normalize_bdf("0000:05:00", tool="t", line_no=1, allow_missing_function=True) == "0000:05:00.0"
    assert normalize_bdf("0000:E3:00.0", tool="t", line_no=1) == "0000:e3:00.0"


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("\x1b[37mROCk module version 6.16.13 is loaded\x1b[0m", "ROCk module version 6.16.13 is loaded"),
        ("^[3m   (DID,     GUID)  ^[0m", "   (DID,     GUID)  "),
        ("^[[1;31mERROR^[[0m", "ERROR"),
        ("plain [1002:74a1] text", "plain [1002:74a1] text"),
    ],
)
def test_common_strip_ansi_removes_raw_and_caret_escapes(raw: str, clean: str) -> None:
    assert strip_ansi(raw) == clean


@pytest.mark.parametrize(("value", "na"), [("N/A", True), (" n/a ", True), ("NA", False), ("", False), (None, False)])
def test_common_is_na(value: str | None, na: bool) -> None:
    assert is_na(value) is na
