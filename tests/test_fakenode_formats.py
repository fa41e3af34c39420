"""Fake-node outputs keep the real formats: given the values of a corpus capture, they reproduce it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from upgrade_gate.fakenode import GpuSpec, NicSpec, NodeSpec, mi300x_node
from upgrade_gate.fakenode.render_gpu import render_amdsmi_static, render_rocminfo
from upgrade_gate.fakenode.render_host import render_ibv_devinfo, render_lspci, render_rdma_link
from upgrade_gate.fakenode.spec import MI300X_FIRMWARE
from upgrade_gate.model import replace

FIXTURES = Path(__file__).parent / "fixtures" / "fakenode"
CORPUS_BUSES = (0x1B, 0x3D, 0x4E, 0x5F, 0x9D, 0xBD, 0xCD, 0xDD)  # both MI300X captures' layout


def _twin(unique_ids: list[int], **gpu_fields: object) -> NodeSpec:
    """A spec with the identity of a corpus capture."""
    firmware = tuple((b, {"CP_MEC1": "150", "SDMA0": "21"}.get(b, v)) for b, v in MI300X_FIRMWARE)
    gpus = tuple(
        GpuSpec(
            bdf=f"0000:{bus:02x}:00.0",
            serial=str(gpu_fields.get("serials", [""] * 8)[i]),  # type: ignore[index]
            unique_id=unique_ids[i],
            kfd_gpu_id=1000 + i,
            numa_node=0 if i < 4 else 1,
            oam_id=(1, 0, 3, 2, 6, 7, 5, 4)[i],
            firmware=firmware,
            vbios="113-M3000108-103",
            ifwi_version="00159017",
        )
        for i, bus in enumerate(CORPUS_BUSES)
    )
    return NodeSpec(name="twin", gpus=gpus, enumeration_order=tuple(range(8)))


def test_fakenode_rocminfo_reproduces_corpus_capture() -> None:
    corpus = (FIXTURES / "mi300x-8gpu-rocm6.2.3-support.txt").read_text(encoding="utf-8")
    uuids = [int(u, 16) for u in re.findall(r"Uuid:\s+GPU-([0-9a-f]{16})", corpus)]
    spec = replace(_twin(uuids), driver_version="6.8.5")
    assert render_rocminfo(spec) == corpus


def test_fakenode_amdsmi_static_reproduces_corpus_capture() -> None:
    corpus_text = (
        FIXTURES / "static-json-mi300x-8gpu-amdsmi26.2.2-rocm7.2.1-sriov-ifwi-dell-ai-fixture.json"
    ).read_text(encoding="utf-8")
    corpus = json.loads(corpus_text)["gpu_data"]
    spec = _twin(
        [int(g["asic"]["asic_serial"], 16) for g in corpus],
        serials=[g["board"]["product_serial"] for g in corpus],
    )
    spec = replace(spec, driver_version="6.16.13", static_partition_section=False)
    rendered = render_amdsmi_static(spec)
    assert rendered == corpus_text + "\n"  # amd-smi prints a newline; the fixture file has none


def test_fakenode_amdsmi_static_partition_section_follows_ras() -> None:
    doc = json.loads(render_amdsmi_static(mi300x_node("n", seed=3)))
    keys = list(doc["gpu_data"][0])
    assert keys[keys.index("ras") + 1] == "partition"
    assert doc["gpu_data"][0]["partition"] == {
        "compute_partition": "SPX",
        "memory_partition": "NPS1",
        "partition_id": 0,
    }


def test_fakenode_ibv_devinfo_plain_fields_match_ionic_capture_with_tabs_expanded() -> None:
    corpus = (FIXTURES / "ibv_devinfo-8x-ionic-pollara-fw1.117.1-tabs-expanded.txt").read_text(encoding="utf-8")
    guids = re.findall(r"node_guid:\s+(\S+)", corpus)
    base = mi300x_node("n", seed=0)
    nics = tuple(replace(nic, node_guid=guids[i]) for i, nic in enumerate(base.nics))
    rendered = render_ibv_devinfo(replace(base, nics=nics))
    plain_keys = {
        "hca_id", "transport", "fw_ver", "node_guid", "sys_image_guid", "vendor_id", "vendor_part_id", "hw_ver",
        "phys_port_cnt", "port", "state", "max_mtu", "active_mtu", "sm_lid", "port_lid", "port_lmc", "link_layer",
    }  # fmt: skip
    kept = [line.expandtabs(8) for line in rendered.split("\n") if line.strip().split(":", 1)[0] in plain_keys]
    assert kept == [line for line in corpus.split("\n") if line]
    assert rendered.count("\n\nhca_id:") == 7 and rendered.endswith("\n\n")


def test_fakenode_ibv_devinfo_prints_roce_v1_and_v2_gids_like_rdma_core() -> None:
    nic = NicSpec(name="ionic_0", bdf="0000:06:00.0", netdev="enp6s0np0", node_guid="0690:81ff:fe36:b328",
                  numa_node=0, ipv4="192.168.1.17")  # fmt: skip
    spec = replace(mi300x_node("n", nic_count=1), nics=(nic,))
    gids = [line for line in render_ibv_devinfo(spec).split("\n") if "GID[" in line]
    assert gids == [
        "\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:0690:81ff:fe36:b328, RoCE v1",
        "\t\t\tGID[  1]:\t\tfe80::690:81ff:fe36:b328, RoCE v2",
        "\t\t\tGID[  2]:\t\t0000:0000:0000:0000:0000:ffff:c0a8:0111, RoCE v1",
        "\t\t\tGID[  3]:\t\t::ffff:192.168.1.17, RoCE v2",
    ]


def test_fakenode_rdma_link_line_has_iproute2_layout() -> None:
    corpus = (FIXTURES / "rdma-link-show-bnxt_re-2port-one-DOWN-DISABLED.txt").read_text(encoding="utf-8")
    pattern = re.compile(r"link \S+/\d+ state (ACTIVE|DOWN) physical_state (LINK_UP|DISABLED) netdev \S+ $")
    assert all(pattern.match(line) for line in corpus.splitlines())
    rendered = render_rdma_link(mi300x_node("n")).splitlines()
    assert len(rendered) == 8 and all(pattern.match(line) for line in rendered)


def test_fakenode_lspci_block_keeps_capture_layout() -> None:
    corpus = (FIXTURES / "cx7-socket-direct-gen5-x16-vvv-libkmod-warning.txt").read_text(encoding="utf-8")
    rendered = render_lspci(mi300x_node("n"))
    corpus_shapes = {re.sub(r"[0-9a-f]", "0", line) for line in corpus.splitlines()}
    substituted = (
        "0000:",
        "\tSubsystem:",
        "\tRegion 0:",
        "\tKernel driver in use:",
        "\tKernel modules:",
        "\t\tLnkSta:",
    )
    for line in rendered.splitlines():
        if not line or line.startswith(substituted):
            continue
        assert re.sub(r"[0-9a-f]", "0", line) in corpus_shapes, line
