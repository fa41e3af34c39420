"""AMD Instinct nodes: ROCm's tools (rocminfo, amd-smi, rocm-smi), the amdgpu kernel log, HIP's pins.

The probe order is the capture order docs/PROBES.md has always listed (the common probes between the
groups come from `collect.probes`). `rocmsmi` and `rocmsmi_topo` are fallbacks: `capture` runs them only
when an amd-smi probe they stand in for failed.
"""

from __future__ import annotations

from upgrade_gate.vendors.base import READLINK_ARGV, CommandSpec, FileSpec, KubeFacts, OrderPin, UtilSampler, Vendor

MESH_ARGV = ("all_reduce_perf", "-b", "<start>", "-e", "<end>", "-f", "<factor>", "-g", "<ngpus>", "-n", "<iters>")
"""Phase 2's command (validate.phases.mesh): rccl-tests and nccl-tests take the same options."""

AMDSMI_FALLBACK_TARGETS = ("amdsmi_list", "amdsmi_static", "amdsmi_firmware", "amdsmi_topology")

ROCMSMI_ARGV = (
    "rocm-smi",
    "--showproductname",
    "--showbus",
    "--showuniqueid",
    "--showserial",
    "--showfwinfo",
    "--showvbios",  # "VBIOS version": the part number amd-smi prints as vbios.part_number (issue 29)
    "--showdriverversion",
    "--json",
)

AMD = Vendor(
    name="amd",
    title="AMD",
    marker_probe="rocminfo",
    gpu_probes=(
        CommandSpec(name="rocminfo", argv=("rocminfo",), parser="rocminfo"),
        CommandSpec(
            name="amdsmi_version", argv=("amd-smi", "version", "--json"), parser="amd-smi-version", required=False
        ),
        CommandSpec(name="amdsmi_list", argv=("amd-smi", "list", "--json"), parser="amd-smi-list"),
        CommandSpec(name="amdsmi_static", argv=("amd-smi", "static", "--json"), parser="amd-smi-static"),
        CommandSpec(name="amdsmi_firmware", argv=("amd-smi", "firmware", "--json"), parser="amd-smi-firmware"),
        CommandSpec(name="amdsmi_topology", argv=("amd-smi", "topology", "--json"), parser="amd-smi-topology"),
        CommandSpec(
            name="rocmsmi", argv=ROCMSMI_ARGV, parser="rocm-smi", required=False, fallback_for=AMDSMI_FALLBACK_TARGETS
        ),
        CommandSpec(
            name="rocmsmi_topo",
            argv=("rocm-smi", "--showtopo", "--json"),
            parser="rocm-smi",
            required=False,
            fallback_for=("amdsmi_topology",),
        ),
    ),
    stack_probes=(
        FileSpec(name="driver_version", globs=("sys/module/amdgpu/version",)),
        FileSpec(name="rocm_version", globs=("opt/rocm/.info/version",)),
        # upgrade-gate's own ELF reader lists the ROCm libraries (soname, symbol-set hash): upgrade_gate.abi.listing.
        # Optional: its loss blocks through rule library.unplanned wherever the baseline recorded libraries.
        FileSpec(
            name="rocm_libs",
            globs=("opt/rocm/lib",),
            parser="abi-list",
            argv=("upgrade-gate", "abi-list"),
            required=False,
            timeout_s=300.0,
            absent_warns=True,
        ),
    ),
    dmesg_parser="dmesg",
    kernel_patterns="dmesg_patterns.yaml",
    tail_probes=(
        # The soname programs load; readlink -f names the real file (librccl.so.1.0.<ROCm build>).
        FileSpec(
            name="rccl_library",
            globs=("opt/rocm/lib/librccl.so.1",),
            parser="readlink-rccl",
            argv=READLINK_ARGV,
        ),
    ),
    anchor_probes=("rocminfo", "lspci", "kernel", "driver_version", "rocm_version", "dmesg"),
    pin=OrderPin(
        uuid_var="ROCR_VISIBLE_DEVICES",
        index_var="HIP_VISIBLE_DEVICES",
        note="UUIDs survive re-enumeration; HIP_VISIBLE_DEVICES takes indices only",
    ),
    fake_shapes=(
        "upgrade_gate.fakenode.spec.mi300x_node",
        "upgrade_gate.fakenode.shapes.mi300x_cpx_node",
        "upgrade_gate.fakenode.shapes.mi210_node",
    ),
    phase_commands={
        1: ("rvs", "-c", "<conf>", "-j"),  # or agfhc -r <recipe> (validate.phases.acceptance)
        2: MESH_ARGV,
    },
    tools=("rocminfo", "amd-smi", "rocm-smi"),
    gpu_evidence=("rocminfo", "amdsmi_list"),
    no_gpu="no AMD GPU found on the node (stands in for feature.node.kubernetes.io/amd-gpu=true)",  # cvf.NFD_AMD_GPU
    kube=KubeFacts(
        gpu_resource="amd.com/gpu",  # the AMD GPU device plugin's extended resource
        node_label=("feature.node.kubernetes.io/amd-gpu", "true"),  # CVF's default NODE_SELECTOR_LABELS (NFD rule)
        mount_rocm=True,  # amd-smi, rocm-smi, rocminfo: the node's own ROCm, not the image's
        collective_image="rocm/rccl-tests:latest",
        workload_image="rocm/pytorch:latest",  # AMD's public PyTorch-on-ROCm image
    ),
    # `-u, --gfx`: "Monitor graphics utilization (%) and clock (MHz)"; amd-smi's index -> BDF from `list`
    util=UtilSampler(argv=("amd-smi", "monitor", "-u"), list_argv=("amd-smi", "list", "--json")),
)
"""The AMD vendor (the only one before issue 30: a bundle without a vendor marker reads as AMD)."""
