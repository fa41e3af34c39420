"""Issue 27: parsers say what they cannot read ("not JSON", "unsupported form"), never keep an error text
as a value, and the ROCm 6.0/6.1 rocm-smi product-name JSON keeps its device id ("Card Model").

Fixtures: tests/fixtures/issue27/PROVENANCE.md; amd-smi version captures of tests/fixtures/amd-smi.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from upgrade_gate.errors import ParseError
from upgrade_gate.parse import amdsmi, rocmsmi

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _read(folder: str, name: str) -> str:
    return (FIXTURES / folder / name).read_text(encoding="utf-8")


DASHBOARD = _read("issue27", "default-mi300x-vf-1gpu-guest-amdsmi26.2.2-rocm7.2.4.txt")
VERSION_JSON = _read("amd-smi", "version-json-26.2.2-rocm7.2.1-root.json")
FILE_ERROR = "AMDSMI_STATUS_FILE_ERROR - Error opening file"


@pytest.mark.parametrize(
    "parse",
    [amdsmi.parse_amdsmi_version, amdsmi.parse_amdsmi_list, amdsmi.parse_amdsmi_static, amdsmi.parse_amdsmi_firmware],
)
def test_forms_bare_amdsmi_dashboard_is_an_unsupported_form(parse: object) -> None:
    with pytest.raises(ParseError, match="unsupported form: the bare `amd-smi` dashboard"):
        parse(DASHBOARD)  # type: ignore[operator]


def test_forms_json_after_an_unknown_banner_is_not_json() -> None:
    text = "amd-smi: some banner this parser does not know\n" + VERSION_JSON
    with pytest.raises(ParseError, match=r"not JSON: the JSON starts at line 2 after 1 line\(s\) of other text"):
        amdsmi.parse_amdsmi_version(text)
    with pytest.raises(ParseError, match="not JSON"):
        amdsmi.parse_amdsmi_list('some banner\n[\n  {"gpu": 0, "bdf": "0000:05:00.0"}\n]\n')


def test_forms_amdsmi_version_error_text_is_not_kept_as_the_driver_version() -> None:
    version = amdsmi.parse_amdsmi_version(VERSION_JSON.replace('"6.16.13"', f'"{FILE_ERROR}"'))
    assert version.amdgpu_version is None
    assert version.rejected == (("amdgpu_version", FILE_ERROR),)
    assert version.printed("amdgpu_version") == FILE_ERROR
    assert version.rocm_version == "7.2.1"


def test_forms_amdsmi_version_garbled_proc_version_is_not_a_version() -> None:
    line = (
        "AMDSMI Tool: 26.0.2+1 | AMDSMI Library version: 26.0.2 | ROCm version: 7.0.2 | "
        "amdgpu version: Linuxversion6.17.0(ubuntu@ubuntu)(gcc) | amd_hsmp version: N/A\n"
    )
    version = amdsmi.parse_amdsmi_version(line)
    assert version.amdgpu_version is None and version.rejected[0][0] == "amdgpu_version"


def test_forms_rocmsmi_6_0_product_name_card_model_is_the_device_id() -> None:
    text = (FIXTURES / "issue27" / "mi250x-showproductname-json-card-model-device-id-rocm6.0.json").read_text(
        encoding="utf-8"
    )
    gpu = rocmsmi.parse_rocmsmi(text).gpus[0]
    assert gpu.device_id == "0x7408" and gpu.subsystem_id == "0x0b0c"


def test_forms_rocmsmi_5_card_model_is_not_a_device_id() -> None:
    """ROCm <= 5.7: "Card model" is the subsystem (MI100 0x0c34 beside GPU ID 0x738c) or a failed lookup."""
    text = '{"card0": {"Card series": "0x1002", "Card model": "0x1002", "Card vendor": "0x1002", "Card SKU": "67XA6S"}}'
    assert rocmsmi.parse_rocmsmi(text).gpus[0].device_id is None
