"""ib_write_bw parser on the real corpus: units, interleaved outputs, shell noise, the rail measurement."""

from __future__ import annotations

import pytest

from tests.conftest import FIXTURES
from upgrade_gate.errors import ParseError
from upgrade_gate.parse import perftest as pt

DIR = FIXTURES / "perftest"
CASES = sorted(DIR.glob("*.txt"))
MIB_TO_GBPS = 1048576 * 8 / 1e9


def _parse(name: str) -> pt.PerftestResult:
    return pt.parse_ib_write_bw((DIR / name).read_text(encoding="utf-8"))


def test_perftest_gbits_all_sizes_behind_job_control_and_prompt() -> None:
    r = _parse("ib_write_bw-bidir-q4-a-gbits-ionic7-server-bg-job-prompt-mixed-mi355x.txt")
    assert (r.device, r.num_qps, r.link_type, r.gid_index, r.mtu_bytes) == ("ionic_7", 4, "Ethernet", 1, 4096)
    assert r.bidirectional and r.role == "server" and r.unit == "Gb/sec"
    assert r.header["Using DDP"] == "OFF"
    assert len(r.rows) == 23 and r.rows[0].bw_peak == pytest.approx(0.147331)
    assert (r.largest.bytes, r.largest.iterations) == (8388608, 20000)
    assert r.bw_average_gbps == pytest.approx(779.21)


def test_perftest_mib_units_normalised_to_gbps() -> None:
    r = _parse("ib_write_bw-gdr-use_rocm-ionic0-client-a-MiB-mi355x.txt")
    assert r.unit == "MiB/sec" and r.use_rocm and r.role == "client" and len(r.rows) == 23
    assert r.rows[11].bytes == 4096 and r.rows[11].msg_rate_mpps == pytest.approx(3.491638)
    assert r.largest.bw_average == pytest.approx(19044.43)
    assert r.bw_average_gbps == pytest.approx(19044.43 * MIB_TO_GBPS)  # ~159.8 Gb/s on a 400G NIC


def test_perftest_server_with_only_the_last_row() -> None:
    r = _parse("ib_write_bw-gdr-use_rocm-ionic0-server-mi355x-only-last-row.txt")
    assert r.role == "server" and [row.bytes for row in r.rows] == [8388608]


def test_perftest_warning_inside_table_and_duration_mode() -> None:
    r = _parse("ib_write_bw-roce-100g-bidir-cpufreq-warning.txt")
    assert r.warnings[0].startswith("WARNING: BW peak won't be measured")
    assert r.warnings[1].startswith("Conflicting CPU frequency values detected")
    row = r.rows[0]
    assert (row.bytes, row.iterations, row.bw_peak, row.bw_average) == (65536, 560845, 0.0, 98.02)
    assert r.gid_index == 4 and r.bidirectional


def test_perftest_interleaved_server_and_client_dedupes_echoed_rows() -> None:
    r = _parse("ib_write_bw-loopback-all-sizes-interleaved-superbench.txt")
    assert r.role == "mixed" and r.unit == "MB/sec" and len(r.rows) == 23
    assert r.rows[-1].bw_average == pytest.approx(23240.68)
    eight = _parse("ib_write_bw-loopback-ib-8M-server-and-client-interleaved.txt")
    assert eight.role == "mixed" and len(eight.rows) == 1
    assert eight.rows[0].bw_average_gbps == pytest.approx(24056.72 * MIB_TO_GBPS)


def test_perftest_fragment_with_tabs_has_no_header() -> None:
    r = _parse("ib_write_bw-ionic-pollara-expected-8M-row-fragment-tabs.txt")
    assert r.device is None and r.num_qps is None and r.bw_average_gbps == pytest.approx(391.34)
    with pytest.raises(ParseError, match="Number of qps"):
        pt.to_measurement(r, rail="ionic_7", peer=None)


def test_perftest_broadcom_three_qps_duration_mode_rdma_cm() -> None:
    r = _parse("ib_write_bw-bnxt_re0-400g-3qp-duration-rdma_cm-scc24.txt")
    assert (r.device, r.num_qps, r.link_type, r.gid_index, r.mtu_bytes) == ("bnxt_re0", 3, "Ethernet", 3, 1024)
    assert r.header["Data ex. method"] == "rdma_cm" and r.unit == "Gb/sec" and not r.bidirectional
    (row,) = r.rows
    assert (row.bytes, row.iterations, row.bw_peak) == (65536, 4159603, 0.0)  # -D: no peak measured
    assert r.bw_average_gbps == pytest.approx(363.47)
    m = pt.to_measurement(r, rail="bnxt_re0", peer="10.0.0.10")
    assert m.settings == {"msg_size": "65536", "qps": "3", "peer": "10.0.0.10"}


def test_perftest_to_measurement_key_unit_settings() -> None:
    r = _parse("ib_write_bw-gdr-use_rocm-ionic0-client-a-MiB-mi355x.txt")
    m = pt.to_measurement(r, rail="ionic_0", peer="node-b")
    assert (m.key, m.unit) == ("rail/ionic_0/write_bw", "Gb/s")
    assert m.samples == (pytest.approx(19044.43 * MIB_TO_GBPS),)
    assert m.settings == {"msg_size": "8388608", "qps": "1", "peer": "node-b", "use_rocm": "true"}
    bidir = pt.to_measurement(
        _parse("ib_write_bw-bidir-q4-a-gbits-ionic7-server-bg-job-prompt-mixed-mi355x.txt"), rail="ionic_7", peer=None
    )
    assert bidir.settings == {"msg_size": "8388608", "qps": "4", "bidirectional": "true"}
    with pytest.raises(ParseError, match="not rail 'ionic_1'"):
        pt.to_measurement(r, rail="ionic_1", peer=None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Couldn't connect to 10.0.0.1:18515\n", "no '#bytes"),
        (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n", "has no rows"),
        (" #bytes  #iterations  BW peak[Gb/sec]  BW average[Gb/sec]  MsgRate[Mpps]\n 65536  1000  9.1\n", "5 numeric"),
        (" #bytes  #iterations  BW peak[Kb/sec]  BW average[Kb/sec]  MsgRate[Mpps]\n", "units"),
    ],
)
def test_perftest_rejects_failed_or_truncated_runs(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        pt.parse_ib_write_bw(text)
