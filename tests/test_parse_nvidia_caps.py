"""Sanity caps of the NVIDIA parsers (issue 30, hostile input): past each cap the parser refuses at once.

Without the caps 16 MiB inputs (the capture's per-probe cap) peaked at 1,195 MB (`-q -x`, 4M empty
elements), 2,467 MB (`topo -m`, 2,000 devices), 698 MB (`nvlink -s`) and 649 MB (`dcgmi diag`) through
`upgrade-gate parse`; with them at 60-104 MB (numbers in the issue 30 report; memory is not asserted here).
"""

from __future__ import annotations

import pytest

from tests.conftest import FIXTURES
from upgrade_gate.errors import ParseError
from upgrade_gate.parse import dcgmi, nvidia_smi_nvlink, nvidia_smi_topo, nvidia_smi_xml


def test_nvidia_smi_xml_refuses_more_elements_than_the_cap() -> None:
    text = "<nvidia_smi_log>\n<attached_gpus>0</attached_gpus>\n" + "<a/>" * nvidia_smi_xml._MAX_ELEMENTS
    with pytest.raises(ParseError, match="more than 100000 XML elements"):
        nvidia_smi_xml.parse_nvidia_smi_xml(text + "</nvidia_smi_log>\n")


def test_nvidia_smi_topo_refuses_more_device_columns_than_the_cap() -> None:
    n = nvidia_smi_topo.MAX_DEVICES + 1
    header = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\n"
    with pytest.raises(ParseError, match="257 device columns, more than 256"):
        nvidia_smi_topo.parse_nvidia_smi_topo(header)


def test_nvidia_smi_nvlink_refuses_more_links_than_the_cap() -> None:
    gpu = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5baec991-de63-c196-1766-04c38407e133)\n"
    links = "".join(f"\t Link {k}: 26.562 GB/s\n" for k in range(nvidia_smi_nvlink.MAX_LINKS + 1))
    with pytest.raises(ParseError, match="GPU 0 has more than 64 links"):
        nvidia_smi_nvlink.parse_nvidia_smi_nvlink(gpu + links)


def test_dcgmi_refuses_more_rows_than_the_cap() -> None:
    lines = (FIXTURES / "dcgmi" / "a100x8-p4de-diag-r2-nvlinks-expected-up-dcgm3.3.3.txt").read_text().splitlines()
    row = "| GPU Memory                | Pass - All                                     |"
    text = "\n".join(lines[:-2] + [row] * dcgmi.MAX_ROWS + lines[-2:]) + "\n"
    with pytest.raises(ParseError, match="more than 10000 table rows"):
        dcgmi.parse_dcgmi_diag(text)
