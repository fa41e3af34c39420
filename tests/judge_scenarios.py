"""A realistic 8-GPU MI300X node as model values, and the faults the judge's golden scenarios apply.

Values follow the corpus (../shared/corpus): BDFs of the 8-GPU MI300X rccl-tests run
(rccl-tests/mi300x-8gpu-k8s-mpi-allreduce-develop-a7809b3.txt: 0000:05/15/65/75/85/95/e5/f5 here,
as the gate's issue asks), board serials and ASIC-serial unique ids in amd-smi's form
(amd-smi/static-json-mi300x-8gpu-...json: product_serial "692409006566", asic_serial
"0x28246CE5673B4AA0"), firmware block names as amd-smi firmware prints them
(amd-smi/firmware-mi355x-gpu0-only-oci-pollara.txt), the all-XGMI weight-15 hop-1 matrix of
amd-smi/topology-mi300x-8gpu-doc-example-amdsmi-changelog-rocm6.1-weight15.txt, Gen5 x16 links
(lspci/mi300x-8gpu-lspci-vvv-grep-lnksta-tabs-expanded.txt), Pollara AINICs ionic_0..7 with fw
1.117.1-a-63 (ibv_devinfo/ibv_devinfo-8x-ionic-pollara-fw1.117.1-tabs-expanded.txt) and the
out-of-place busbw of the MI300X all_reduce sweep (same rccl-tests file) for 1K..2G. Samples are the
nominal value times 1 + N(0, noise) from a seeded generator, so every scenario is deterministic.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from upgrade_gate.judge.plan import ChangePlan, plan_from_dict
from upgrade_gate.model import (
    Bdf,
    Gpu,
    GpuLink,
    GpuSerial,
    LinkType,
    Measurement,
    Nic,
    NicPort,
    NodeInfo,
    NodeName,
    PcieLink,
    PhaseResult,
    PhaseStatus,
    ProbeStatus,
    Snapshot,
    Software,
    SriovFunction,
    replace,
)

if TYPE_CHECKING:
    from upgrade_gate.model import GateReport
    from upgrade_gate.store.gitstore import BaselineStore

NODE = NodeName("mi300x-node-01")
NODE_CLASS = "mi300x-8gpu"
NOW = "2026-11-30T12:00:00Z"
GPU_BDFS = tuple(Bdf(f"0000:{bus}:00.0") for bus in ("05", "15", "65", "75", "85", "95", "e5", "f5"))
NIC_BDFS = tuple(Bdf(f"0000:{bus}:00.0") for bus in ("06", "16", "66", "76", "86", "96", "e6", "f6"))
SERIALS = tuple(GpuSerial(f"6924090065{n:02d}") for n in (66, 54, 48, 60, 90, 59, 51, 63))
UNIQUE_IDS = (
    "0x28246CE5673B4AA0",
    "0xA1C623D04774B0C2",
    "0xE2B4766321837EA7",
    "0x002F6A94E6C0D368",
    "0x143261234961D2A2",
    "0x9E3AA584C6BE5FD7",
    "0x32BD9C97AE82FAEE",
    "0x3B933C598FC957E9",
)
FIRMWARE = {
    "CP_MEC1": "177",
    "CP_MEC2": "177",
    "RLC": "104",
    "SDMA0": "19",
    "SDMA1": "19",
    "VCN": "09.10.90.31",
    "PSP_SOSDRV": "00.36.02.59",
    "TA_RAS": "1B.36.02.14",
    "TA_XGMI": "20.00.00.14",
    "PM": "00.85.129.00",
    "PLDM_BUNDLE": "01.25.03.12",
}
NIC_FW = "1.117.1-a-63"
# out-of-place busbw (GB/s) of the MI300X all_reduce sweep, 1 KiB .. 2 GiB
MESH_BUSBW = {
    1 << 10: 0.13, 1 << 11: 0.26, 1 << 12: 0.52, 1 << 13: 1.04, 1 << 14: 1.85, 1 << 15: 4.11,
    1 << 16: 8.05, 1 << 17: 15.71, 1 << 18: 26.28, 1 << 19: 33.60, 1 << 20: 64.64, 1 << 21: 100.05,
    1 << 22: 138.60, 1 << 23: 173.16, 1 << 24: 195.85, 1 << 25: 238.45, 1 << 26: 271.51, 1 << 27: 293.50,
    1 << 28: 304.96, 1 << 29: 310.37, 1 << 30: 313.66, 1 << 31: 314.75,
}  # fmt: skip
SWEEP_SETTINGS = {
    "min_bytes": "1024",
    "max_bytes": "2147483648",
    "step_factor": "2",
    "iters": "20",
    "warmup_iters": "5",
    "ranks": "8",
    "datatype": "float",
    "op": "sum",
}
PROBES = (
    "rocminfo", "amdsmi_version", "amdsmi_list", "amdsmi_static", "amdsmi_firmware", "amdsmi_topology",
    "lspci", "ibv_devinfo", "rdma_link", "sysfs_sriov", "sysfs_ib", "driver_version", "rocm_version",
    "kernel", "dmesg",
)  # fmt: skip


def _samples(rng: random.Random, nominal: float, n: int, noise: float) -> tuple[float, ...]:
    return tuple(round(nominal * (1.0 + rng.gauss(0.0, noise)), 4) for _ in range(n))


def _sweep(rng: random.Random, prefix: str, op: str, scale: float, noise: float, ranks: str) -> list[Measurement]:
    settings = {**SWEEP_SETTINGS, "ranks": ranks}
    out = [
        Measurement(
            key=f"{prefix}/{op}/busbw/{size}",
            unit="GB/s",
            samples=_samples(rng, bw * scale, 5, noise),
            settings=dict(settings),
            source="rccl-tests",
        )
        for size, bw in MESH_BUSBW.items()
    ]
    avg = statistics.fmean(MESH_BUSBW.values()) * scale
    out.append(
        Measurement(
            key=f"{prefix}/{op}/avg_busbw",
            unit="GB/s",
            samples=_samples(rng, avg, 5, noise),
            settings=dict(settings),
            source="rccl-tests",
        )
    )
    return out


def _thermal(seed: int) -> list[Measurement]:
    """Phase 2's thermal readings (validate.phases.thermal): a healthy spread of a few °C, own rng."""
    rng = random.Random(f"thermal/{seed}")
    settings = {"tool": "amd-smi monitor -p -t", "load": "all_reduce_perf -b 1K -e 2G -f 2 -g 8 -n 20 -w 5"}
    out = []
    for i, bdf in enumerate(GPU_BDFS):
        hot = {**settings, "bdf": str(bdf), "sensor": "hotspot"}
        temp = round(64.0 + (i % 4) + rng.gauss(0.0, 0.5))
        for key, unit, value, sensor in (
            ("temp_c_max", "C", temp, "hotspot"),
            ("power_w_mean", "W", 705.0, "socket power"),
        ):
            out.append(
                Measurement(
                    key=f"thermal/gpu{i}/{key}",
                    unit=unit,
                    samples=(value,),
                    settings={**hot, "sensor": sensor},
                    source="phase 2 thermal sampling",
                    higher_is_better=False,
                )
            )
    return out


def mi300x_snapshot(
    *,
    node: str = NODE,
    seed: int = 1,
    noise: float = 0.03,
    rocm: str = "6.1.3",
    driver: str = "6.7.0",
    taken_at: str = "2026-11-29T09:00:00Z",
) -> Snapshot:
    """A healthy 8 x MI300X node with 8 Pollara NICs and a complete CVF run (phases 1-5 passed)."""
    rng = random.Random(seed)
    gpus = tuple(
        Gpu(
            index=i,
            bdf=bdf,
            serial=SERIALS[i],
            unique_id=UNIQUE_IDS[i],
            product_name="AMD Instinct MI300X OAM",
            gfx_target="gfx942",
            device_id="0x74a1",
            numa_node=0 if i < 4 else 1,
            compute_partition="SPX",
            memory_partition="NPS1",
            vram_total_mib=196592,
            compute_units=304,
            firmware=dict(FIRMWARE),
            vbios="113-M3000100-102",
        )
        for i, bdf in enumerate(GPU_BDFS)
    )
    links = tuple(
        GpuLink(a=GPU_BDFS[i], b=GPU_BDFS[j], link_type=LinkType.XGMI, hops=1, weight=15)
        for i in range(8)
        for j in range(i + 1, 8)
    )
    pcie = tuple(
        PcieLink(bdf=bdf, vendor_device=vd, speed_gts=32.0, width=16, max_speed_gts=32.0, max_width=16)
        for bdfs, vd in ((GPU_BDFS, "1002:74a1"), (NIC_BDFS, "1dd8:1002"))
        for bdf in bdfs
    )
    nics = tuple(
        Nic(
            name=f"ionic_{i}",
            bdf=bdf,
            netdev=f"enp{int(str(bdf)[5:7], 16)}s0np0",
            fw_ver=NIC_FW,
            node_guid=f"0690:81ff:fe36:{0xB328 + i:04x}",
            vendor_part_id="4098",
            ports=(
                NicPort(
                    port=1,
                    state="PORT_ACTIVE",
                    phys_state="LINK_UP",
                    link_layer="Ethernet",
                    rate_gbps=400.0,
                    mtu=4096,
                    gid_count=4,
                    roce_v2=True,
                    netdev=f"enp{int(str(bdf)[5:7], 16)}s0np0",
                ),
            ),
            sriov_numvfs=4,
            sriov_totalvfs=16,
        )
        for i, bdf in enumerate(NIC_BDFS)
    )
    sriov = tuple(SriovFunction(bdf=bdf, numvfs=4, totalvfs=16) for bdf in NIC_BDFS)
    mesh = _sweep(rng, "mesh", "all_reduce", 1.0, noise, "8") + _thermal(seed)
    cluster = _sweep(rng, "cluster", "all_reduce", 0.62, noise, "16") + _sweep(
        rng, "cluster", "all_gather", 0.55, noise, "16"
    )
    rails = [
        Measurement(
            key=f"rail/ionic_{i}/write_bw",
            unit="Gb/s",
            samples=_samples(rng, 392.0, 1, noise / 3),
            settings={"msg_size": "8388608", "qps": "4", "peer": "mi300x-node-02"},
            source="ib_write_bw",
        )
        for i in range(8)
    ]
    phases = (
        PhaseResult(phase=1, name="gpu-hw-acceptance", status=PhaseStatus.PASSED),
        PhaseResult(phase=2, name="gpu-mesh-validation", status=PhaseStatus.PASSED, measurements=tuple(mesh)),
        PhaseResult(phase=3, name="nic-health", status=PhaseStatus.PASSED),
        PhaseResult(
            phase=4, name="rail-bandwidth", status=PhaseStatus.PASSED, measurements=tuple(rails), peer="mi300x-node-02"
        ),
        PhaseResult(
            phase=5, name="cluster-rccl", status=PhaseStatus.PASSED, measurements=tuple(cluster), peer="mi300x-node-02"
        ),
    )
    return Snapshot(
        node=NodeInfo(name=NodeName(node), hostname=node, node_class=NODE_CLASS),
        taken_at=taken_at,
        tool_version="0.1.0",
        software=Software(
            kernel="5.15.0-116-generic",
            driver_version=driver,
            rocm_version=rocm,
            rocm_build=f"{rocm}-{'66' if rocm == '6.2.0' else '122'}",
            amdsmi_version="24.5.1" if rocm == "6.1.3" else "24.6.2",
        ),
        gpus=gpus,
        gpu_links=links,
        pcie=pcie,
        nics=nics,
        sriov=sriov,
        phases=phases,
        probes=tuple(ProbeStatus(name=p, ok=True, required=p != "amdsmi_version") for p in PROBES),
    )


def upgraded(seed: int = 2, **kwargs: object) -> Snapshot:
    """The same node after the planned ROCm 6.1.3 -> 6.2.0 (amdgpu 6.7.0 -> 6.8.5) upgrade, healthy."""
    return mi300x_snapshot(seed=seed, rocm="6.2.0", driver="6.8.5", taken_at="2026-11-30T11:00:00Z", **kwargs)  # type: ignore[arg-type]


def upgrade_plan(**extra: object) -> ChangePlan:
    """The change plan of the scenarios: ROCm 6.1.3 -> 6.2.0 with its amdgpu driver."""
    doc: dict[str, object] = {
        "id": "rocm-6.2.0",
        "description": "ROCm 6.1.3 -> 6.2.0 on the mi300x-8gpu class",
        "change": {"rocm": {"from": "6.1.3", "to": "6.2.0"}, "driver": {"from": "6.7.0", "to": "6.8.5"}},
        "canaries": {"max_fraction": 0.10, "min": 1, "cap": 4},
    }
    doc.update(extra)
    return plan_from_dict(doc, source="scenario plan")


def judge_one(candidate: Snapshot, baseline: Snapshot | None = None, **kw: Any) -> GateReport:
    """`judge` of one candidate against `baseline` (`mi300x_snapshot()` unless given) under `upgrade_plan()`
    and the default policy, at NOW; `kw` go to `judge` (tool_version, denylist...)."""
    from upgrade_gate.judge.judge import judge
    from upgrade_gate.judge.policy import load_policy

    base = baseline if baseline is not None else mi300x_snapshot()
    return judge(
        baselines={base.node.name: base},
        candidates=[candidate],
        plan=upgrade_plan(),
        policy=load_policy(),
        now=NOW,
        **kw,
    )


# --------------------------------------------------------------------------- faults


def reverse_order(snap: Snapshot) -> Snapshot:
    """The incident: the GPUs enumerate in reverse (index 0 is now the GPU in slot f5)."""
    n = len(snap.gpus)
    reversed_gpus = sorted((replace(g, index=n - 1 - g.index) for g in snap.gpus), key=lambda g: g.index)
    return replace(snap, gpus=tuple(reversed_gpus))


def lose_vf(snap: Snapshot, pf: str = "0000:66:00.0") -> Snapshot:
    """One VF of a NIC PF gone after a PF reset (4 -> 3)."""
    sriov = tuple(replace(f, numvfs=3) if f.bdf == pf else f for f in snap.sriov)
    nics = tuple(replace(n, sriov_numvfs=3) if n.bdf == pf else n for n in snap.nics)
    return replace(snap, sriov=sriov, nics=nics)


def narrow_link(snap: Snapshot, bdf: str = "0000:65:00.0") -> Snapshot:
    """A GPU link trained at x8 instead of x16."""
    return replace(snap, pcie=tuple(replace(lk, width=8, downgraded=True) if lk.bdf == bdf else lk for lk in snap.pcie))


def set_firmware(snap: Snapshot, block: str, version: str, serial: str = SERIALS[3]) -> Snapshot:
    """One GPU's firmware block at another version."""
    gpus = tuple(replace(g, firmware={**g.firmware, block: version}) if g.serial == serial else g for g in snap.gpus)
    return replace(snap, gpus=gpus)


def scale_metrics(snap: Snapshot, factor: float, match: Callable[[str], bool]) -> Snapshot:
    """Every sample of the matching measurements times `factor` (0.85 = a 15% drop)."""

    def scaled(m: Measurement) -> Measurement:
        return replace(m, samples=tuple(round(s * factor, 4) for s in m.samples)) if match(m.key) else m

    phases = tuple(replace(p, measurements=tuple(scaled(m) for m in p.measurements)) for p in snap.phases)
    return replace(snap, phases=phases, measurements=tuple(scaled(m) for m in snap.measurements))


def with_software(snap: Snapshot, **fields: str) -> Snapshot:
    """The snapshot with some software fields replaced."""
    return replace(snap, software=replace(snap.software, **fields))  # type: ignore[arg-type]


def named_snapshot(name: str, seed: int = 1) -> Snapshot:
    """`mi300x_snapshot(seed)` as node `name`."""
    base = mi300x_snapshot(seed=seed)
    return replace(base, node=replace(base.node, name=name))


def three_node_store(path: Path) -> BaselineStore:
    """A baseline store at `path` holding node-0..node-2 (seeds 1..3), saved in one commit."""
    from upgrade_gate.store.gitstore import BaselineStore

    st = BaselineStore(path)
    st.save([named_snapshot(f"node-{i}", seed=i + 1) for i in range(3)], message="three")
    return st
