"""Property tests: mutated corpus outputs fed to the rocminfo, lspci, sysfs and dmesg parsers.

Whatever the input - lines deleted, duplicated or truncated, random bytes inserted, characters swapped -
a parser either returns a value or raises ParseError; no other exception may escape.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import FIXTURES
from upgrade_gate.errors import ParseError
from upgrade_gate.parse.common import is_na, normalize_bdf, strip_ansi
from upgrade_gate.parse.dmesg import PARSERS as DMESG
from upgrade_gate.parse.lspci import PARSERS as LSPCI
from upgrade_gate.parse.rocminfo import PARSERS as ROCMINFO
from upgrade_gate.parse.sysfs import PARSERS as SYSFS

_SEEDS: dict[str, tuple[str, str]] = {
    # parser key -> (fixture folder, file-name prefix of its seeds)
    "rocminfo": ("rocminfo", ""),
    "lspci": ("lspci", ""),
    "sysfs-grep": ("sysfs", "grep-"),
    "kfd-properties": ("sysfs", "kfd-"),
    "uname-r": ("sysfs", "uname-r-"),
    "dmesg": ("dmesg", ""),
}
_PARSERS: dict[str, Callable[[str], object]] = {**ROCMINFO, **LSPCI, **SYSFS, **DMESG}


@functools.cache
def _seeds(key: str) -> tuple[str, ...]:
    folder, prefix = _SEEDS[key]
    paths = sorted((FIXTURES / folder).glob(f"{prefix}*.txt"))
    assert paths, f"no seeds for {key}"
    return tuple(p.read_text(encoding="utf-8") for p in paths)


_noise = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)) | st.sampled_from(":[]()\t\x1b#=*0123456789"),
    max_size=12,
)


@st.composite
def _mutated(draw: st.DrawFn, seeds: tuple[str, ...]) -> str:
    text = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        lines = text.split("\n")
        op = draw(st.sampled_from(("delete", "duplicate", "truncate", "insert", "swap", "replace_line")))
        i = draw(st.integers(min_value=0, max_value=max(len(lines) - 1, 0)))
        if op == "delete" and lines:
            del lines[i]
            text = "\n".join(lines)
        elif op == "duplicate" and lines:
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        elif op == "replace_line" and lines:
            lines[i] = draw(_noise)
            text = "\n".join(lines)
        elif op == "truncate":
            text = text[: draw(st.integers(min_value=0, max_value=len(text)))]
        elif op == "insert":
            pos = draw(st.integers(min_value=0, max_value=len(text)))
            text = text[:pos] + draw(_noise) + text[pos:]
        elif op == "swap" and len(text) > 1:
            pos = draw(st.integers(min_value=0, max_value=len(text) - 2))
            text = text[:pos] + text[pos + 1] + text[pos] + text[pos + 2 :]
    return text


def _only_parse_error(parse: Callable[[str], object], text: str) -> None:
    with contextlib.suppress(ParseError):
        parse(text)


@pytest.mark.parametrize("key", sorted(_SEEDS))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_parsers_only_raise_parse_error_on_mutated_corpus(key: str, data: st.DataObject) -> None:
    text = data.draw(_mutated(_seeds(key)))
    _only_parse_error(_PARSERS[key], text)


@pytest.mark.parametrize("key", sorted(_SEEDS))
@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=400))
def test_parsers_only_raise_parse_error_on_random_text(key: str, text: str) -> None:
    _only_parse_error(_PARSERS[key], text)


@pytest.mark.parametrize("key", sorted(_SEEDS))
def test_parsers_accept_their_unmutated_seeds_or_raise_parse_error(key: str) -> None:
    for text in _seeds(key):
        _only_parse_error(_PARSERS[key], text)


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
