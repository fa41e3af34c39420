"""`PciAddress`: the BDF value type (parse/format round trip, short forms, ordering, refusals)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from upgrade_gate.errors import ParseError
from upgrade_gate.model import replace
from upgrade_gate.parse.bdf import MAX_DEVICE, PciAddress, address_of

addresses = st.builds(
    PciAddress,
    domain=st.one_of(st.integers(0, 0xFFFF), st.integers(0x10000, 0xFFFFFFFF)),
    bus=st.integers(0, 0xFF),
    device=st.integers(0, MAX_DEVICE),
    function=st.integers(0, 7),
)


@given(addresses)
def test_bdf_format_parse_round_trip(address: PciAddress) -> None:
    text = str(address)
    assert PciAddress.parse(text) == address
    assert PciAddress.parse(text.upper()) == address
    assert PciAddress.parse(f"  {text}\n") == address
    assert address.bdf == text == text.lower()


@given(addresses)
def test_bdf_short_forms_round_trip_when_allowed(address: PciAddress) -> None:
    short = PciAddress.parse(address.short, allow_missing_domain=True)
    assert short == replace(address, domain=0)
    slot = PciAddress.parse(address.slot_text, allow_missing_function=True)
    assert slot == address.with_function(0)
    assert address.display == (address.short if address.domain == 0 else str(address))
    assert PciAddress.from_bdf_id(address.bdf_id, domain=address.domain) == address


@given(addresses)
def test_bdf_short_forms_refused_unless_the_format_defines_them(address: PciAddress) -> None:
    with pytest.raises(ParseError, match="without a domain"):
        PciAddress.parse(address.short)
    with pytest.raises(ParseError, match="without a function"):
        PciAddress.parse(address.slot_text)


@given(addresses, addresses)
def test_bdf_orders_numerically_and_as_canonical_text(a: PciAddress, b: PciAddress) -> None:
    assert (a < b) == ((a.domain, a.bus, a.device, a.function) < (b.domain, b.bus, b.device, b.function))
    if a.domain <= 0xFFFF and b.domain <= 0xFFFF:  # four-digit domains: text order is numeric order
        assert (a < b) == (str(a) < str(b))
    assert (a == b) == (hash(a) == hash(b) and str(a) == str(b))


def test_bdf_is_frozen_and_hashable() -> None:
    address = PciAddress.parse("0000:05:00.3")
    with pytest.raises(dataclasses.FrozenInstanceError):
        address.function = 1  # type: ignore[misc]
    assert {address, PciAddress.parse("0000:05:00.3")} == {address}
    assert address.slot == (0, 5, 0) and address.with_function(0).bdf == "0000:05:00.0"


_hex = "0123456789abcdefABCDEF"


@given(
    st.one_of(
        st.text(max_size=20),
        # the right shape with a digit out of range: device above 0x1f, function above 7
        st.builds(lambda d: f"0000:05:{d:02x}.0", st.integers(MAX_DEVICE + 1, 0xFF)),
        st.builds(lambda f: f"0000:05:00.{f}", st.integers(8, 9)),
        # too few or too many digits in a field
        st.builds(lambda n: f"{'0' * n}:05:00.0", st.sampled_from([1, 2, 3, 9])),
        st.builds(lambda b: f"0000:{b}:00.0", st.text(_hex, min_size=1, max_size=4).filter(lambda b: len(b) != 2)),
        st.builds(lambda s: f"0000:05:00.0{s}", st.text(min_size=1, max_size=3).filter(lambda s: s.strip() != "")),
    )
)
def test_bdf_refuses_malformed_text_with_parse_error(raw: str) -> None:
    try:
        address = PciAddress.parse(raw)
    except ParseError as exc:
        assert exc.tool == "pci-address"
        return
    # Only text of the exact canonical shape may pass (hypothesis' free text can hit one by chance).
    assert str(address) == raw.strip().lower()


@pytest.mark.parametrize(
    "raw",
    ["", "05:00.0", "0000:05:00", "0000:05:20.0", "0000:05:00.8", "0000:5:00.0", "0000:05:00.0.1", "g000:05:00.0"],
)
def test_bdf_refusals_name_the_tool_and_line(raw: str) -> None:
    with pytest.raises(ParseError) as info:
        PciAddress.parse(raw, tool="lspci", line_no=7)
    assert (info.value.tool, info.value.line_no) == ("lspci", 7)


def test_bdf_value_range_is_checked_on_construction() -> None:
    with pytest.raises(ValueError, match="device"):
        PciAddress(domain=0, bus=0, device=0x20, function=0)
    with pytest.raises(ValueError, match="function"):
        PciAddress(domain=0, bus=0, device=0, function=8)


def test_address_of_stored_text() -> None:
    assert address_of(None) is None
    assert address_of("not a bdf") is None
    assert address_of("10000:e1:00.1") == PciAddress(domain=0x10000, bus=0xE1, device=0, function=1)
