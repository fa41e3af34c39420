"""Issue 27's measure: for one broken thing on a node, what the first cause line says.

For every fault kind the fake nodes can inject (tool-level faults on every probe and phase tool, every
semantic fault) and each case of issue 27, a healthy fake MI300X baseline and a broken candidate go
through the real chain, as README workflow 1 has an operator do it: capture with every probe
(`--timeout 3`, as the issue's operator did), build the snapshot, run CVF phases 0-3 on the node alone
(a short config: two recipes, 3 samples), then the judge with the shipped default policy, no plan, and
the console's cause grouping. The row records the verdict, the first cause line as the console prints
it (the headline), the number of blocking causes, and whether that first line names the broken thing's
device (BDF or serial) where there is one device to name.

    python3 -m bench.root_causes [--out results.json] [--before results.json] [--only SUBSTRING]

With `--before` the Markdown table puts the earlier run's first line and cause count beside this run's
(the issue's before/after). Nothing is timed: the table is about what the operator reads.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from upgrade_gate.fakenode import (
    DMESG_ACA_MODE1_RESET,
    DMESG_FATAL_INIT,
    Faults,
    NodeSpec,
    build_fake_node,
    faults,
    mi300x_cpx_node,
    mi300x_node,
)
from upgrade_gate.model import NodeName, Severity, Snapshot, replace

NODE = "gpu-node-01"
NOW = "2026-12-05T12:00:00Z"
FAST = {
    "GPU_VALIDATION_STAGES_JSON": json.dumps(
        [
            {"Name": "gpu-stress", "Framework": "RVS", "Recipe": "gst_single", "TimeoutSeconds": 60},
            {"Name": "hbm-lvl1", "Framework": "AGFHC", "Recipe": "hbm_lvl1", "TimeoutSeconds": 60},
        ]
    ),
    "UPGRADE_GATE_SAMPLES": "3",
}
# The non-root permission banner amd-smi prints before its output (tests/test_snapshot_evidence.py).
BANNER = "WARNING: User is missing the following required groups: render, video. Please add user to these groups.\n"
PROBE_TOOLS = ("rocminfo", "amd-smi", "rocm-smi", "lspci", "ibv_devinfo", "rdma", "uname", "dmesg")
PHASE_TOOLS = ("rvs", "agfhc", "all_reduce_perf", "all_gather_perf")
Edit = Callable[[dict[str, str]], dict[str, str]]


@dataclass(frozen=True, slots=True)
class Case:
    """One broken candidate: its spec, tool faults, bundle edits, and the device its cause must name."""

    name: str
    spec: NodeSpec
    faults: Faults = field(default_factory=Faults)
    edit: Edit | None = None
    device: str | None = None  # a BDF or serial the first cause line must name
    baseline: NodeSpec | None = None  # another baseline (the partition cases)


def _spec() -> NodeSpec:
    return mi300x_node(NODE, seed=1)


def _gpu_fw(spec: NodeSpec, gpu: int, block: str, value: str) -> NodeSpec:
    g = spec.gpus[gpu]
    fw = tuple((k, value if k == block else v) for k, v in g.firmware)
    return replace(spec, gpus=tuple(replace(x, firmware=fw) if i == gpu else x for i, x in enumerate(spec.gpus)))


def _vfs(spec: NodeSpec, count: int) -> NodeSpec:
    return replace(spec, nics=tuple(replace(n, sriov_numvfs=count) for n in spec.nics))


def _append_dmesg(lines: str) -> Edit:
    def edit(out: dict[str, str]) -> dict[str, str]:
        return {**out, "dmesg": out["dmesg"] + lines}

    return edit


FILE_ERROR = "AMDSMI_STATUS_FILE_ERROR - Error opening file"
# Real wordings (tests/fixtures/dmesg/PROVENANCE.md, issue 27), with the fake node's first GPU as the device.
RING_TIMEOUT = (
    "[99999.000001] amdgpu 0000:05:00.0: amdgpu: GPU reset begin!\n"
    "[99999.000002] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, signaled seq=5000163, "
    "emitted seq=5000165\n"
    "[99999.000003] amdgpu 0000:05:00.0: amdgpu: MODE1 reset\n"
)
PAGE_FAULT = (
    "[99999.000001] amdgpu 0000:05:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:24 vmid:8 pasid:32770, "
    "for process python pid 1796 thread python pid 1796)\n"
)
IP_HUNG = "[99999.000001] amdgpu 0000:05:00.0: amdgpu: IP block:gfx_v11_0 is hung!\n"
EARLY_INIT = (
    "[99999.000001] amdgpu 0000:05:00.0: Direct firmware load for amdgpu/psp_13_0_6_sos.bin failed with error -2\n"
    "[99999.000002] [drm:amdgpu_device_ip_early_init [amdgpu]] *ERROR* early_init of IP block <psp> failed -19\n"
    "[99999.000003] amdgpu 0000:05:00.0: Direct firmware load for amdgpu/smu_13_0_6.bin failed with error -2\n"
)


def _no_render(out: dict[str, str]) -> dict[str, str]:
    """amd-smi run outside the render group (tests/test_snapshot_evidence.py `_no_render`)."""
    import re

    version = out["amdsmi_version"].replace('"6.7.0"', f'"{FILE_ERROR}"')
    static = re.sub(
        r'("driver": \{\s*"name": "amdgpu",\s*"version": )"6\.7\.0"', rf'\1"{FILE_ERROR}"', out["amdsmi_static"]
    )
    return {**out, "amdsmi_version": BANNER + version, "amdsmi_static": BANNER + static}


def _banner(record: str) -> Edit:
    def edit(out: dict[str, str]) -> dict[str, str]:
        return {**out, record: BANNER + out[record]}

    return edit


def cases() -> list[Case]:
    """Every fault kind of the fake nodes, then the cases of issue 27."""
    spec = _spec()
    bdf0 = spec.gpus[0].bdf
    out: list[Case] = [Case("healthy, unchanged (README workflow 1)", spec)]
    for tool in PROBE_TOOLS + PHASE_TOOLS:
        out.append(Case(f"{tool} missing", spec, Faults(tools={tool: faults.missing()})))
        out.append(Case(f"{tool} hangs", spec, Faults(tools={tool: faults.hang()})))
        out.append(Case(f"{tool} exits 1", spec, Faults(tools={tool: faults.nonzero(1, f"{tool}: failed")})))
        out.append(Case(f"{tool} prints garbage", spec, Faults(tools={tool: faults.garbage()})))
    nic0 = spec.nics[0]
    out += [
        Case("GPU order reversed", faults.reverse_enumeration(spec)),
        Case("NIC port down", faults.take_port_down(spec), device=nic0.name),
        Case("NIC port down in rdma link only", faults.take_port_down_in_rdma_link_only(spec), device=nic0.name),
        Case("NIC empty GID table", faults.empty_gid_table(spec), device=nic0.name),
        Case("NIC lost one VF", faults.drop_vfs(_vfs(spec, 4)), device=nic0.name, baseline=_vfs(spec, 4)),
        Case("GPU PCIe link x8", faults.downgrade_gpu_link(spec, 0), device=bdf0),
        Case("NIC PCIe link x8", faults.downgrade_nic_link(spec, 0), device=nic0.name),
        Case("mesh bandwidth -20%", faults.scale_mesh_bandwidth(spec, 0.8)),
        Case("RVS fails on GPU 0 (phase 1)", faults.fail_rvs(spec, 0), device=bdf0),
        Case("AGFHC hbm_bw fails (phase 1)", faults.fail_agfhc(spec)),
        Case("dmesg ACA + mode1 reset", faults.inject_dmesg_event(spec, DMESG_ACA_MODE1_RESET)),
        Case("dmesg fatal init of GPU 0", faults.inject_dmesg_event(spec, DMESG_FATAL_INIT), device=bdf0),
        Case("GPU 0 runs 14 C hot", faults.run_hot(spec, 0), device=bdf0),
        Case("rocminfo hangs (issue)", spec, Faults(tools={"rocminfo": faults.hang()})),
        Case("amd-smi static behind the permission banner", spec, edit=_banner("amdsmi_static")),
        Case("amd-smi as non-root (banner, FILE_ERROR values)", spec, edit=_no_render),
        Case("amd-smi static unparseable", spec, Faults(tools={"amd-smi": faults.garbage(argv_prefix=("static",))})),
        Case("ring timeout line without a BDF", spec, edit=_append_dmesg(RING_TIMEOUT), device=bdf0),
        Case("[gfxhub] page fault without 'retry'", spec, edit=_append_dmesg(PAGE_FAULT), device=bdf0),
        Case("IP block:gfx_v11_0 is hung!", spec, edit=_append_dmesg(IP_HUNG), device=bdf0),
        Case("early_init of IP block <psp> failed", spec, edit=_append_dmesg(EARLY_INIT), device=bdf0),
        Case("one GPU's CP_MEC1 166 -> 1661", _gpu_fw(spec, 3, "CP_MEC1", "1661"), device=spec.gpus[3].bdf),
        Case(
            "SPX/NPS1 -> CPX/NPS4",
            mi300x_cpx_node(NODE, seed=1, gpu_count=8, nic_count=8, node_class=spec.node_class),
        ),
        Case(
            "CPX/NPS4 -> SPX/NPS1",
            spec,
            baseline=mi300x_cpx_node(NODE, seed=1, gpu_count=8, nic_count=8, node_class=spec.node_class),
        ),
    ]
    return out


def _capture(spec: NodeSpec, tool_faults: Faults, edit: Edit | None, work: Path) -> Snapshot:
    from upgrade_gate.cli.collect_cmds import parser_check
    from upgrade_gate.collect.capture import capture
    from upgrade_gate.collect.runner import LocalRunner
    from upgrade_gate.model import NodeName as _Name
    from upgrade_gate.snapshot.build import build_snapshot
    from upgrade_gate.validate.config import parse_cvf_config
    from upgrade_gate.validate.launcher import LocalLauncher
    from upgrade_gate.validate.phases import select_phases
    from upgrade_gate.validate.pipeline import run_pipeline

    node = build_fake_node(work, spec, tool_faults)
    env = node.env(os.environ)
    bundle = capture(LocalRunner(env=env), node=NODE, host_root=node.host_root, timeout=3, output_check=parser_check())
    if edit is not None:
        stdout = {r.name: r.result.stdout for r in bundle.records}
        changed = edit(stdout)
        records = tuple(
            replace(r, result=replace(r.result, stdout=changed[r.name])) if changed[r.name] != stdout[r.name] else r
            for r in bundle.records
        )
        bundle = replace(bundle, records=records)
    snapshot = build_snapshot(bundle, node_class=spec.node_class)
    results = run_pipeline(
        [NODE],
        phases=select_phases(frozenset({0, 1, 2, 3})),
        config=parse_cvf_config(FAST, source="bench"),
        launcher=LocalLauncher({NODE: env}),
        snapshots={NODE: snapshot},
        peers=(),
        samples=3,
    )[_Name(NODE)]
    return replace(snapshot, phases=results)


def run_case(case: Case, work: Path, baselines: dict[str, Snapshot]) -> dict[str, object]:
    """Gate `case`'s candidate against its baseline; the first cause line, cause count and device check."""
    from upgrade_gate.judge.causes import group_causes
    from upgrade_gate.judge.judge import judge
    from upgrade_gate.judge.policy import load_policy

    base_spec = case.baseline or _spec()
    key = f"{base_spec.compute_partition}/{sum(n.sriov_numvfs for n in base_spec.nics)}"
    if key not in baselines:
        baselines[key] = _capture(base_spec, Faults(), None, work / f"baseline-{key}")
    candidate = _capture(case.spec, case.faults, case.edit, work / "candidate")
    report = judge(
        baselines={NodeName(NODE): baselines[key]}, candidates=[candidate], plan=None, policy=load_policy(), now=NOW
    )
    report = group_causes(report, baselines={NodeName(NODE): baselines[key]}, candidates={NodeName(NODE): candidate})
    causes = report.nodes[0].causes
    blocking = [c for c in causes if c.severity is Severity.BLOCK]
    first = causes[0].headline if causes else "(no cause)"
    right = None if case.device is None else case.device.lower() in first.lower()
    if os.environ.get("ROOT_CAUSES_VERBOSE"):
        for c in causes:
            print(f"    {c.severity.value} {c.key}: {c.headline}", file=sys.stderr)
    return {
        "case": case.name,
        "verdict": report.verdict.value,
        "first": first,
        "blocking": len(blocking),
        "device_named": right,
        "findings": len(report.nodes[0].findings),
    }


def markdown(rows: list[dict[str, object]], before: dict[str, dict[str, object]]) -> str:
    """The table: before and after side by side when an earlier run is given."""
    head = "| case | verdict | blocking causes | first cause line | device named |"
    if before:
        head = (
            "| case | before: blocking | before: first cause line | after: verdict | after: blocking "
            "| after: first cause line | device named |"
        )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]

    def cell(text: object) -> str:
        return str(text).replace("|", "\\|")[:160]

    for row in rows:
        named = {None: "-", True: "yes", False: "NO"}[row["device_named"]]  # type: ignore[index]
        if before:
            old = before.get(str(row["case"]), {})
            lines.append(
                f"| {cell(row['case'])} | {old.get('blocking', '?')} | {cell(old.get('first', '?'))} | "
                f"{row['verdict']} | {row['blocking']} | {cell(row['first'])} | {named} |"
            )
        else:
            lines.append(
                f"| {cell(row['case'])} | {row['verdict']} | {row['blocking']} | {cell(row['first'])} | {named} |"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    """Run every case and print the table (JSON rows to --out)."""
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else None
    before_file = Path(argv[argv.index("--before") + 1]) if "--before" in argv else None
    only = argv[argv.index("--only") + 1] if "--only" in argv else ""
    before = {str(r["case"]): r for r in json.loads(before_file.read_text())} if before_file else {}
    rows: list[dict[str, object]] = []
    baselines: dict[str, Snapshot] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(c for c in cases() if only in c.name):
            row = run_case(case, Path(tmp) / str(i), baselines)
            print(f"{row['case']}: {row['verdict']} {row['blocking']} | {row['first']}", file=sys.stderr)
            rows.append(row)
    if out is not None:
        out.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    print(markdown(rows, before))


if __name__ == "__main__":
    main(sys.argv[1:])
