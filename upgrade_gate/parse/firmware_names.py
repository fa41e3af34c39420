"""One firmware vocabulary: rocm-smi's block names and version formats mapped onto amd-smi's.

The snapshot names firmware blocks as `amd-smi firmware` does (`CP_MEC1`, `PSP_SOSDRV`, `PM`...). When
amd-smi is unusable and rocm-smi stands in, its blocks (`MEC`, `SOS`, `SMC`...) and its formats
(`0x0017004f`, `27.00.01.62`) would otherwise diff against an amd-smi baseline block by block, turning
one broken tool into hundreds of "firmware changed" findings. Both tools read the same 32-bit number
from the same library call, so the mapping is exact:

- Names: ROCm/amdsmi src/amd_smi/amd_smi.cc `amdsmi_get_fw_info`, map `fw_in_rsmi`
  (`AMDSMI_FW_ID_CP_MEC1 <- RSMI_FW_BLOCK_MEC`, `AMDSMI_FW_ID_PM <- RSMI_FW_BLOCK_SMC`,
  `AMDSMI_FW_ID_PSP_SOSDRV <- RSMI_FW_BLOCK_SOS`, ...); amd-smi prints the id without `AMDSMI_FW_ID_`.
- rocm-smi's formats (rocm_smi.py `showFwInfo`): `0x%08x` for VCN, VCE, UVD, SOS, ASD, MES, MES KIQ;
  each byte of the zero-filled hex as `%02d`, dotted, for TA XGMI, TA RAS, SMC; plain decimal otherwise.
- amd-smi's formats (py-interface/amdsmi_interface.py `amdsmi_get_fw_info`): hex digit pairs, dotted,
  upper case for PSP_SOSDRV, TA_RAS, TA_XGMI, UVD, VCE, VCN; each byte in decimal for PM; plain decimal
  otherwise. Dated note: amd-smi 26.x (ROCm 7.0.2, corpus amd-smi/firmware-mi355x-gpu0-only-oci-pollara.txt)
  zero-fills to eight hex digits (`00.45.00.29`, `04.86.15.106`); that is the form produced here.
A rocm-smi block outside the map keeps its name with blanks as `_` and its value as printed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from upgrade_gate.parse.common import digits

ROCMSMI_TO_AMDSMI = {
    "ASD": "ASD",
    "CE": "CP_CE",
    "DMCU": "DMCU",
    "MC": "MC",
    "ME": "CP_ME",
    "MEC": "CP_MEC1",
    "MEC2": "CP_MEC2",
    "PFP": "CP_PFP",
    "RLC": "RLC",
    "RLC SRLC": "RLC_RESTORE_LIST_CNTL",
    "RLC SRLG": "RLC_RESTORE_LIST_GPM_MEM",
    "RLC SRLS": "RLC_RESTORE_LIST_SRM_MEM",
    "SDMA": "SDMA0",
    "SDMA2": "SDMA1",
    "SMC": "PM",
    "SOS": "PSP_SOSDRV",
    "TA RAS": "TA_RAS",
    "TA XGMI": "TA_XGMI",
    "UVD": "UVD",
    "VCE": "VCE",
    "VCN": "VCN",
}
_ROCMSMI_BYTES = frozenset({"TA XGMI", "TA RAS", "SMC"})
_ROCMSMI_HEX = frozenset({"VCN", "VCE", "UVD", "SOS", "ASD", "MES", "MES KIQ"})
_AMDSMI_HEX = frozenset({"PSP_SOSDRV", "TA_RAS", "TA_XGMI", "UVD", "VCE", "VCN"})
_AMDSMI_DEC_BYTES = frozenset({"PM"})
_HEX_RE = re.compile(r"^0x[0-9a-fA-F]{1,8}$")
_BYTES_RE = re.compile(r"^\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}$")


def _rocmsmi_number(block: str, printed: str) -> int | None:
    text = printed.strip()
    if block in _ROCMSMI_BYTES and _BYTES_RE.match(text):
        parts = [int(p) for p in text.split(".")]
        if all(p <= 0xFF for p in parts):
            return (parts[0] << 24) | (parts[1] << 16) | (parts[2] << 8) | parts[3]
        return None
    if _HEX_RE.match(text):
        return int(text, 16)
    if digits(text):
        return int(text)
    return None


def amdsmi_format(block: str, number: int) -> str:
    """The version string amd-smi prints for `number` in firmware block `block` (amd-smi's name)."""
    digits = f"{number:08x}"
    pairs = [digits[i : i + 2] for i in range(0, len(digits), 2)]
    if block in _AMDSMI_HEX:
        return ".".join(pairs).upper()
    if block in _AMDSMI_DEC_BYTES:
        return ".".join(f"{int(p, 16):02d}" for p in pairs)
    return str(number)


def amdsmi_number(block: str, printed: str) -> int | None:
    """The number behind amd-smi's version string for `block`, or None when it is not in amd-smi's format."""
    text = printed.strip()
    try:
        if block in _AMDSMI_HEX:
            return int(text.replace(".", ""), 16)
        if block in _AMDSMI_DEC_BYTES:
            parts = [int(p) for p in text.split(".")]
            if len(parts) != 4 or any(p > 0xFF for p in parts):
                return None
            return (parts[0] << 24) | (parts[1] << 16) | (parts[2] << 8) | parts[3]
        return int(text)
    except ValueError:
        return None


def rocmsmi_format(block: str, number: int) -> str:
    """The version string rocm-smi prints for `number` in its block `block` (rocm-smi's name)."""
    if block in _ROCMSMI_BYTES:
        digits = f"{number:08x}"
        return ".".join(f"{int(digits[i : i + 2], 16):02d}" for i in range(0, 8, 2))
    if block in _ROCMSMI_HEX:
        return f"0x{number:08x}"
    return str(number)


def rocmsmi_block(block: str, printed: str) -> tuple[str, str]:
    """One rocm-smi block and its version as amd-smi names and prints them: ("SMC", "00.54.29.00") -> ("PM", ...).

    Blocks are matched case-insensitively, so two printed names can land on one amd-smi block ("SMC" and
    "smc"; "SMC" and amd-smi's own "PM"): the rocm-smi parser refuses two such entries with different
    versions, so that `rocmsmi_to_amdsmi` never has to choose between them."""
    key = " ".join(block.upper().split())
    name = ROCMSMI_TO_AMDSMI.get(key)
    if name is None:
        return key.replace(" ", "_"), printed
    number = _rocmsmi_number(key, printed)
    return name, amdsmi_format(name, number) if number is not None else printed


def rocmsmi_to_amdsmi(firmware: Mapping[str, str]) -> dict[str, str]:
    """rocm-smi's `{block: version}` in amd-smi's names and formats (one entry per amd-smi block: the
    parser refuses a card that prints one block twice with different versions)."""
    return dict(rocmsmi_block(block, printed) for block, printed in firmware.items())


__all__ = [
    "ROCMSMI_TO_AMDSMI",
    "amdsmi_format",
    "amdsmi_number",
    "rocmsmi_block",
    "rocmsmi_format",
    "rocmsmi_to_amdsmi",
]
