"""Host-side outputs of a fake node: lspci, ibv_devinfo, rdma link, dmesg, uname.

Formats (sources in tests/fixtures/fakenode/PROVENANCE.md):
- `lspci -D -nn -vvv`: the full `-vvv` block of the corpus ConnectX-7 capture is the layout of every GPU
  and NIC block (its VPD capability, which is Mellanox data, is dropped; the SR-IOV capability is kept
  for NICs only). Header and Subsystem lines use the `-nn` form of the corpus MI300X `lspci -nnk` doc
  capture. LnkSta compares with LnkCap like pciutils' ls-caps.c `link_compare` of the version that
  printed the corpus ("(ok)", "(downgraded)", "(strange)"). "Kernel modules:" is printed because a host
  with working libkmod prints it (the corpus capture lacks it only because of its libkmod warning).
- `ibv_devinfo -v`: the ionic device fields of the corpus Pollara capture in the real tab layout of the
  corpus ConnectX-6 `-vv` capture (whose `-v` capability lines are kept verbatim), GIDs printed like
  rdma-core's devinfo.c `print_formated_gid` (RoCE v1: 8 hex groups; RoCE v2: inet_ntop form).
- `rdma link show`: the corpus bnxt_re capture's line format, trailing space included.
- host facts: `/sys/class/dmi/id/bios_{vendor,version,date}` one value each (sysfs-firmware-dmi); a
  `/proc/cmdline` like the real one of ROCm/legacy-rocm-build #4533 (`BOOT_IMAGE=/vmlinuz-<kernel> ...`);
  `/etc/os-release` as Ubuntu 22.04.4 / 24.04.1 ship it (os-release(5) layout); `/opt/rocm/lib/librccl.so.1`
  a relative symlink to `librccl.so.1.0.<ROCm as 60103>`, ROCm's file naming (e.g. librccl.so.1.0.70200).
- `dmesg`: per GPU the benign corpus lines (ECC active, PCIE GART, PTB) with the timestamps of plain
  `dmesg`; the injectable event is the corpus MI300X ACA/MODE1 reset excerpt with its BDFs mapped onto
  the node's GPUs by position.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

from upgrade_gate.fakenode.spec import DMESG_ACA_MODE1_RESET, DMESG_FATAL_INIT, GpuSpec, NicSpec, NodeSpec
from upgrade_gate.fakenode.templates import fill, fill_sequence, load_template

_AMD_VENDOR_NAME = "Advanced Micro Devices, Inc. [AMD/ATI]"
_PENSANDO = "AMD Pensando Systems"  # hwdata's vendor name; 1dd8:1002 itself is not in pci.ids yet
_NIC_SUBSYSTEM_ID = 0x5201
_NIC_VF_DEVICE_ID = "1003"


def render_lspci(spec: NodeSpec) -> str:
    """`lspci -D -nn -vvv`: GPU and NIC blocks in BDF order."""
    devices: list[GpuSpec | NicSpec] = [*(g for g in spec.gpus if g.physical), *spec.nics]
    devices.sort(key=lambda d: d.bdf)
    return "".join(_lspci_block(index, device) for index, device in enumerate(devices))


def _lspci_block(index: int, device: GpuSpec | NicSpec) -> str:
    if isinstance(device, GpuSpec):
        ids = f"[1002:{device.device_id:04x}]"
        name = f"{_AMD_VENDOR_NAME} {device.pci_name}"
        values: dict[str, object] = {
            "CLASS": device.pci_class,
            "DEVICE_NAME": f"{name} {ids}",
            "SUBSYSTEM_NAME": f"{name} {ids}",
            "BAR0": f"{0x20000000000 + index * 0x4000000000:x}",
            "BAR0_SIZE": "256G",
            "DRIVER": "amdgpu",
            "MODULE": "amdgpu",
            "SRIOV": "",
        }
        numa = device.numa_node
    else:
        values = {
            "CLASS": "Ethernet controller [0200]",
            "DEVICE_NAME": f"{_PENSANDO} Device [{device.vendor_id:04x}:{device.device_id:04x}]",
            "SUBSYSTEM_NAME": f"{_PENSANDO} Device [{device.vendor_id:04x}:{_NIC_SUBSYSTEM_ID:04x}]",
            "BAR0": f"{0x38000000000 + index * 0x4000000:x}",
            "BAR0_SIZE": "32M",
            "DRIVER": "ionic",
            "MODULE": "ionic",
            "SRIOV": fill(
                load_template("lspci-sriov-cap.txt"),
                {
                    "VF_ENABLE": "+" if device.sriov_numvfs else "-",
                    "TOTAL_VFS": device.sriov_totalvfs,
                    "NUM_VFS": device.sriov_numvfs,
                    "VF_DEVICE_ID": _NIC_VF_DEVICE_ID,
                },
            ),
        }
        numa = device.numa_node
    link = device.link
    values.update(
        BDF=device.bdf,
        IRQ=200 + index * 33,
        NUMA=numa,
        IOMMU_GROUP=20 + index,
        ROM=f"{0xF6800000 - index * 0x100000:x}",
        MAX_SPEED=_speed(link.max_speed_gts),
        MAX_WIDTH=link.max_width,
        SPEED=_speed(link.speed_gts),
        SPEED_CMP=_compare(link.speed_gts, link.max_speed_gts),
        WIDTH=link.width,
        WIDTH_CMP=_compare(link.width, link.max_width),
    )
    return fill(load_template("lspci-device-vvv.txt"), values)


def _speed(gts: float) -> str:
    return f"{gts:g}"


def _compare(status: float, capability: float) -> str:
    if status < capability:
        return "downgraded"
    if status > capability:
        return "strange"
    return "ok"


def render_ibv_devinfo(spec: NodeSpec) -> str:
    """`ibv_devinfo -v`: one block per NIC, separated by an empty line."""
    return "".join(_ibv_block(nic) for nic in spec.nics)


def _ibv_block(nic: NicSpec) -> str:
    device = fill(
        load_template("ibv_devinfo-device-v.txt"),
        {
            "HCA": nic.name,
            "FW_VER": nic.fw_ver,
            "NODE_GUID": nic.node_guid,
            "VENDOR_ID": f"0x{nic.vendor_id:x}",
            "VENDOR_PART_ID": nic.device_id,
        },
    )
    port = fill(
        load_template("ibv_devinfo-port-v.txt"),
        {
            "PORT": 1,
            "STATE": "PORT_ACTIVE (4)" if nic.port_up else "PORT_DOWN (1)",
            "GID_TBL_LEN": 16,
            "ACTIVE_WIDTH": "4X (2)",
            "ACTIVE_SPEED": "100.0 Gbps (128)" if nic.port_up else "invalid speed (0)",
            "PHYS_STATE": "LINK_UP (5)" if nic.port_up else "DISABLED (3)",
        },
    )
    return device + port + "".join(gid_lines(nic)) + "\n"


def gid_lines(nic: NicSpec) -> list[str]:
    """The `GID[ n]:` lines of one port as ibv_devinfo -v prints them."""
    return [
        f"\t\t\tGID[{index:3d}]:\t\t{_gid_text(raw, v2)}, RoCE {'v2' if v2 else 'v1'}\n"
        for index, (raw, v2) in enumerate(gid_table(nic))
    ]


def gid_table(nic: NicSpec) -> list[tuple[bytes, bool]]:
    """(raw GID, is RoCE v2) per GID index: link-local then IPv4-mapped, v1/v2 pairs."""
    link_local = bytes.fromhex("fe80000000000000") + bytes.fromhex(nic.node_guid.replace(":", ""))
    v4 = [int(x) for x in nic.ipv4.split(".")]
    table = []
    for index in range(nic.gid_count):
        v2 = nic.roce_v2 and index % 2 == 1
        pair = index // 2 if nic.roce_v2 else index
        if pair == 0:
            raw = link_local
        else:
            raw = bytes(10) + b"\xff\xff" + bytes([v4[0], v4[1], v4[2], (v4[3] + pair - 1) % 256])
        table.append((raw, v2))
    return table


def _gid_text(raw: bytes, v2: bool) -> str:
    if not v2:
        return ":".join(raw[i : i + 2].hex() for i in range(0, 16, 2))
    address = ipaddress.IPv6Address(raw)
    if address.ipv4_mapped is not None:  # glibc inet_ntop prints the dotted form
        return f"::ffff:{address.ipv4_mapped}"
    return address.compressed


def render_rdma_link(spec: NodeSpec) -> str:
    """`rdma link show`: one line per port, trailing space as iproute2 prints it."""
    line = load_template("rdma-link-show-line.txt")
    return "".join(
        fill(
            line,
            {
                "DEV": nic.name,
                "PORT": 1,
                "STATE": "ACTIVE" if _rdma_up(nic) else "DOWN",
                "PHYS_STATE": "LINK_UP" if _rdma_up(nic) else "DISABLED",
                "NETDEV": nic.netdev,
            },
        )
        for nic in spec.nics
    )


def _rdma_up(nic: NicSpec) -> bool:
    return nic.port_up if nic.rdma_link_up is None else nic.rdma_link_up


def render_dmesg(spec: NodeSpec) -> str:
    """`dmesg`: a clean amdgpu boot excerpt per GPU, then any injected events."""
    block = load_template("dmesg-boot-amdgpu-gpu.txt")
    parts = []
    micros = 12_104_211
    for gpu in (g for g in spec.gpus if g.physical):
        stamps = []
        for _ in range(block.count("{{TS}}")):
            micros += 1_733
            stamps.append(f"{micros // 1_000_000:5d}.{micros % 1_000_000:06d}")
        parts.append(fill_sequence(block.replace("{{BDF}}", gpu.bdf), "TS", stamps))
    for event in spec.dmesg_events:
        if event == DMESG_ACA_MODE1_RESET:
            parts.append(_aca_event(spec))
        elif event == DMESG_FATAL_INIT:
            parts.append(_fatal_init_event(spec, micros))
        else:
            raise ValueError(f"unknown dmesg event {event!r}; known: {DMESG_ACA_MODE1_RESET}, {DMESG_FATAL_INIT}")
    return "".join(parts)


def _fatal_init_event(spec: NodeSpec, micros: int) -> str:
    """The two lines issue 10 quotes from a real 2x MI210 dmesg (amdgpu 6.16.13), on the first GPU.

    No capture of them is in the corpus; their form is the kernel's: amdgpu_device_init's
    `dev_err(adev->dev, "Fatal error during GPU init\n")` through the amdgpu prefix, and the driver
    core's `pr_warn("%s: probe of %s failed with error %d\n", drv->name, dev_name(dev), ret)`.
    """
    bdf = next(g for g in spec.gpus if g.physical).bdf
    stamps = [f"{(micros + n * 2_113) // 1_000_000:5d}.{(micros + n * 2_113) % 1_000_000:06d}" for n in (1, 2)]
    return (
        f"[{stamps[0]}] amdgpu {bdf}: amdgpu: Fatal error during GPU init\n"
        f"[{stamps[1]}] amdgpu: probe of {bdf} failed with error -12\n"
    )


def _aca_event(spec: NodeSpec) -> str:
    text = load_template("dmesg-aca-mode1-reset.txt")
    if not text.endswith("\n"):
        text += "\n"
    recorded = sorted(set(re.findall(r"0000:[0-9a-f]{2}:00\.0", text)))
    devices = [g for g in spec.gpus if g.physical]
    mapping = {bdf: devices[i % len(devices)].bdf for i, bdf in enumerate(recorded)}
    return re.sub(r"0000:[0-9a-f]{2}:00\.0", lambda m: mapping[m.group(0)], text)


def render_uname_r(spec: NodeSpec) -> str:
    """`uname -r`."""
    return spec.kernel + "\n"


OS_RELEASES = {
    "ubuntu-22.04": (
        'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
        'VERSION="22.04.4 LTS (Jammy Jellyfish)"\nVERSION_CODENAME=jammy\nID=ubuntu\nID_LIKE=debian\n'
        'HOME_URL="https://www.ubuntu.com/"\nUBUNTU_CODENAME=jammy\n'
    ),
    "ubuntu-24.04": (
        'PRETTY_NAME="Ubuntu 24.04.1 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\n'
        'VERSION="24.04.1 LTS (Noble Numbat)"\nVERSION_CODENAME=noble\nID=ubuntu\nID_LIKE=debian\n'
        'HOME_URL="https://www.ubuntu.com/"\nUBUNTU_CODENAME=noble\nLOGO=ubuntu-logo\n'
    ),
}
"""os-release files a fake node can carry, by key."""


def rccl_library_name(rocm_version: str) -> str:
    """ROCm's file name of librccl for a release: 7.2.0 -> librccl.so.1.0.70200."""
    major, minor, patch = (int(x) for x in [*rocm_version.split("."), "0", "0"][:3])
    return f"librccl.so.1.0.{major * 10000 + minor * 100 + patch}"


def write_host_facts(host: Path, spec: NodeSpec) -> None:
    """The host-fact files of `spec` under the host root `host`."""
    dmi = host / "sys" / "class" / "dmi" / "id"
    dmi.mkdir(parents=True)
    for name in ("bios_vendor", "bios_version", "bios_date"):
        (dmi / name).write_text(f"{getattr(spec, name)}\n", encoding="utf-8")
    proc = host / "proc"
    proc.mkdir()
    (proc / "cmdline").write_text(f"BOOT_IMAGE=/vmlinuz-{spec.kernel} {spec.kernel_params}\n", encoding="utf-8")
    etc = host / "etc"
    etc.mkdir()
    (etc / "os-release").write_text(OS_RELEASES[spec.os_release], encoding="utf-8")
    lib = host / "opt" / "rocm" / "lib"
    lib.mkdir(parents=True)
    real = rccl_library_name(spec.rocm_version)
    (lib / real).write_bytes(b"")  # the probe reads the name; no ELF magic, so the ELF reader skips it
    (lib / "librccl.so.1").symlink_to(real)
