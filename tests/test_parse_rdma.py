"""RDMA parsers on the real corpus: ibv_devinfo, rdma link / dev, show_gids, ibstat."""

from __future__ import annotations

import pytest

from tests.conftest import FIXTURES
from upgrade_gate.errors import ParseError
from upgrade_gate.parse import rdma, rdma_tables

DIR = FIXTURES / "ibv_devinfo"
CASES = sorted(DIR.glob("*.txt"))


def _text(name: str) -> str:
    return (DIR / name).read_text(encoding="utf-8")


def test_ibv_devinfo_vv_reads_fw_ports_and_gids() -> None:
    info = rdma.parse_ibv_devinfo(_text("cx6-2port-ib-vv-one-port-down-disabled.txt"))
    assert [d.name for d in info.devices] == ["mlx5_0", "mlx5_1"]
    up, down = (d.ports[0] for d in info.devices)
    assert {d.fw_ver for d in info.devices} == {"20.37.1700"}
    assert info.devices[0].vendor_part_id == "4123"
    assert (up.state, up.state_code, up.phys_state, up.rate_gbps) == ("PORT_ACTIVE", 4, "LINK_UP", 200.0)
    assert (down.state, down.state_code, down.phys_state) == ("PORT_DOWN", 1, "DISABLED")
    assert down.active_speed == "invalid speed" and down.rate_gbps is None
    assert down.port_lid == 65535 and up.active_mtu == 4096
    assert up.gid_count == 1 and up.gid_tbl_len == 8
    assert up.roce_v2 is False  # InfiniBand link layer: no RoCE GIDs


def test_ibv_devinfo_tabs_expanded_ionic_without_gid_table() -> None:
    info = rdma.parse_ibv_devinfo(_text("ibv_devinfo-8x-ionic-pollara-fw1.117.1-tabs-expanded.txt"))
    assert [d.name for d in info.devices] == [f"ionic_{i}" for i in range(8)]
    dev = info.devices[7]
    assert (dev.fw_ver, dev.vendor_id, dev.transport) == ("1.117.1-a-63", "0x1dd8", "InfiniBand (0)")
    port = dev.ports[0]
    assert (port.state, port.link_layer) == ("PORT_ACTIVE", "Ethernet")
    # Not run with -v: the GID table was not printed, so the count is unknown, not zero.
    assert port.gid_count is None and port.roce_v2 is None


# rdma-core devinfo.c print_formated_gid, values substituted (see the fixture PROVENANCE.md).
ROCE_V = (
    "hca_id:\tmlx5_0\n\ttransport:\t\t\tInfiniBand (0)\n\tfw_ver:\t\t\t\t28.39.1002\n"
    "\tnode_guid:\t\t\t1070:fd03:00f1:5e4a\n\tphys_port_cnt:\t\t\t1\n\t\tport:\t1\n"
    "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tlink_layer:\t\tEthernet\n\t\t\tgid_tbl_len:\t\t255\n"
    "{gids}\n"
)


def test_ibv_devinfo_counts_roce_v2_gids() -> None:
    gids = (
        "\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:1270:fdff:fef1:5e4a, RoCE v1\n"
        "\t\t\tGID[  1]:\t\tfe80::1270:fdff:fef1:5e4a, RoCE v2"
    )
    port = rdma.parse_ibv_devinfo(ROCE_V.format(gids=gids)).devices[0].ports[0]
    assert port.gid_count == 2 and port.roce_v2 is True
    assert [g.gid_type for g in port.gids] == ["RoCE v1", "RoCE v2"]


def test_ibv_devinfo_real_roce_bond_vv_with_gid_table() -> None:
    (dev,) = rdma.parse_ibv_devinfo(_text("ibv_devinfo-vv-mlx5-bond-cx6dx-roce-gid-table-mlnx-ofed.txt")).devices
    assert (dev.name, dev.fw_ver, dev.vendor_part_id, dev.phys_port_cnt) == ("mlx5_bond_0", "22.36.1010", "4125", 1)
    (port,) = dev.ports
    assert (port.state, port.link_layer, port.active_width, port.active_speed) == (
        "PORT_ACTIVE",
        "Ethernet",
        "2X",
        "50.0 Gbps",
    )
    assert port.rate_gbps == 100.0 and port.gid_tbl_len == 255
    assert port.gid_count == 4 and port.roce_v2 is True
    assert [g.gid for g in port.gids if g.gid_type == "RoCE v2"] == ["fe80::ac0:ebff:fef0:28b2", "::ffff:27.105.179.3"]


def test_ibv_devinfo_empty_gid_table_is_zero_not_unknown() -> None:
    port = rdma.parse_ibv_devinfo(ROCE_V.format(gids="")).devices[0].ports[0]
    assert port.gid_count == 0 and port.roce_v2 is False


def test_ibv_devinfo_rejects_truncated_block_and_other_tools() -> None:
    text = _text("cx6-2port-ib-vv-one-port-down-disabled.txt")
    cut = text[: text.rindex("\t\tport:")]
    with pytest.raises(ParseError, match="phys_port_cnt 1 but 0 port blocks"):
        rdma.parse_ibv_devinfo(cut)
    with pytest.raises(ParseError, match="before the first 'hca_id:'"):
        rdma.parse_ibv_devinfo(_text("ibv_devices-8x-ionic-tabs-expanded.txt"))


def test_ibv_devinfo_no_devices_is_an_empty_list() -> None:
    assert rdma.parse_ibv_devinfo("No IB devices found\n").devices == ()


def test_rdma_link_reads_state_and_netdev_with_trailing_spaces() -> None:
    links = rdma.parse_rdma_link(_text("rdma-link-show-bnxt_re-2port-one-DOWN-DISABLED.txt")).links
    assert [(lk.device, lk.port, lk.state, lk.physical_state, lk.netdev) for lk in links] == [
        ("bnxt_re0", 1, "ACTIVE", "LINK_UP", "enp194s0f0np0"),
        ("bnxt_re1", 1, "DOWN", "DISABLED", "enp194s0f1np1"),
    ]


def test_rdma_link_ten_links_out_of_device_order() -> None:
    links = rdma.parse_rdma_link(_text("rdma-link-show-8-ionic-2-mlx5-mi355x-oci-pollara.txt")).links
    assert [lk.device for lk in links][:3] == ["ionic_4", "ionic_0", "ionic_3"]
    assert sorted(lk.device for lk in links if lk.device.startswith("ionic")) == [
        f"ionic_{i}" for i in (0, 2, 3, 4, 5, 7, 8, 9)
    ]
    assert {(lk.port, lk.state, lk.physical_state) for lk in links} == {(1, "ACTIVE", "LINK_UP")}
    assert links[-1].netdev == "ens49np1"


def test_rdma_dev_reads_fw_and_guids() -> None:
    devs = rdma.parse_rdma_dev(_text("rdma-dev-bnxt_re-2port-fw231.0.154.0.txt")).devices
    assert [(d.index, d.name, d.fw, d.node_guid) for d in devs] == [
        (0, "bnxt_re0", "231.0.154.0", "8e84:74ff:fe1f:2550"),
        (1, "bnxt_re1", "231.0.154.0", "8e84:74ff:fe1f:2551"),
    ]
    assert devs[0].attrs["protocol"] == "roce"


def test_show_gids_counts_per_port_and_missing_netdev() -> None:
    gids = rdma_tables.parse_show_gids(_text("show_gids-cx4lx-roce-one-port-no-netdev.txt"))
    assert gids.n_gids_found == 5
    assert gids.gid_count("mlx5_0", 1) == 4 and gids.roce_v2("mlx5_0", 1) is True
    assert gids.gid_count("mlx5_1", 1) == 1 and gids.roce_v2("mlx5_1", 1) is False
    last = gids.entries[-1]
    assert (last.device, last.netdev, last.version, last.ipv4) == ("mlx5_1", None, "v1", None)
    assert gids.entries[2].ipv4 == "192.168.6.132"


def test_show_gids_rejects_footer_mismatch() -> None:
    text = _text("show_gids-cx4lx-roce-one-port-no-netdev.txt").replace("n_gids_found=5", "n_gids_found=6")
    with pytest.raises(ParseError, match="footer says 6, table has 5"):
        rdma_tables.parse_show_gids(text)


def test_ibstat_records_the_vanished_device() -> None:
    stat = rdma_tables.parse_ibstat(_text("ibstat-a100-azure-8x-cx6-hdr-ibpanic-exit255-gpud.txt"))
    assert [ca.name for ca in stat.cas] == [f"mlx5_{i}" for i in range(8)]
    assert not stat.complete and stat.vanished == ("mlx5_8",)
    assert stat.failures[0].line_no == 137
    ca = stat.cas[0]
    assert (ca.fw_ver, ca.ca_type, ca.num_ports) == ("20.41.1000", "MT4124", 1)
    assert (ca.ports[0].state, ca.ports[0].rate, ca.ports[0].link_layer) == ("Active", 200, "InfiniBand")


def test_ibstat_complete_without_panic() -> None:
    text = _text("ibstat-a100-azure-8x-cx6-hdr-ibpanic-exit255-gpud.txt")
    stat = rdma_tables.parse_ibstat(text[: text.index("ibpanic:")])
    assert stat.complete and stat.vanished == () and len(stat.cas) == 8


def test_rdma_tables_moved_but_still_registered_in_rdma() -> None:
    assert rdma.PARSERS["show_gids"] is rdma_tables.parse_show_gids
    assert rdma.PARSERS["ibstat"] is rdma_tables.parse_ibstat
    assert rdma.Ibstat is rdma_tables.Ibstat and rdma.ShowGids is rdma_tables.ShowGids
