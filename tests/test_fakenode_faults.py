"""Every fault knob of a fake node: tool-level faults and semantic faults through the spec."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.fakenode import (
    DMESG_ACA_MODE1_RESET,
    Faults,
    NodeSpec,
    ToolFault,
    build_fake_node,
    faults,
    mi300x_node,
)
from upgrade_gate.fakenode.faults import FaultKind
from upgrade_gate.model import replace

SPEC = mi300x_node("node-07", seed=7)


def runner_for(tmp_path: Path, spec: NodeSpec = SPEC, tool_faults: Faults | None = None) -> LocalRunner:
    node = build_fake_node(tmp_path, spec, tool_faults or Faults())
    return LocalRunner(env=node.env(os.environ))


def test_fakenode_hang_is_killed_by_the_runner_timeout(tmp_path: Path) -> None:
    runner = runner_for(tmp_path, tool_faults=Faults(tools={"rocminfo": faults.hang()}))
    result = runner.run(["rocminfo"], timeout=1.0)
    assert result.timed_out and result.returncode is None and not result.ok


def test_fakenode_missing_tool_is_not_found_even_if_the_host_has_one(tmp_path: Path) -> None:
    runner = runner_for(tmp_path, tool_faults=Faults(tools={"uname": faults.missing(), "amd-smi": faults.missing()}))
    for argv in (["uname", "-r"], ["amd-smi", "list", "--json"]):
        result = runner.run(argv, timeout=10.0)
        assert result.missing and not result.ok, argv
    assert runner.run(["rocm-smi", "--showtopo", "--json"], timeout=10.0).ok


def test_fakenode_nonzero_exit_carries_its_stderr_line(tmp_path: Path) -> None:
    fault = faults.nonzero(2, "ERROR:root:Driver not initialized (amdgpu not found in modules)")
    runner = runner_for(tmp_path, tool_faults=Faults(tools={"rocm-smi": fault}))
    result = runner.run(["rocm-smi", "--showtopo", "--json"], timeout=10.0)
    assert result.returncode == 2 and result.stdout == ""
    assert (
        result.failure_reason()
        == "rocm-smi: exit code 2: ERROR:root:Driver not initialized (amdgpu not found in modules)"
    )


def test_fakenode_garbage_exits_zero_with_unparseable_output(tmp_path: Path) -> None:
    runner = runner_for(tmp_path, tool_faults=Faults(tools={"amd-smi": faults.garbage()}))
    result = runner.run(["amd-smi", "static", "--json"], timeout=10.0)
    assert result.ok and result.stdout
    assert "\ufffd" in result.stdout  # invalid UTF-8 arrived
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.stdout)


def test_fakenode_fault_can_target_one_subcommand(tmp_path: Path) -> None:
    fault = faults.nonzero(1, "firmware query failed", argv_prefix=("firmware",))
    runner = runner_for(tmp_path, tool_faults=Faults(tools={"amd-smi": fault}))
    assert runner.run(["amd-smi", "firmware", "--json"], timeout=10.0).returncode == 1
    assert runner.run(["amd-smi", "list", "--json"], timeout=10.0).ok


def test_fakenode_unknown_argv_fails_loudly(tmp_path: Path) -> None:
    result = runner_for(tmp_path).run(["amd-smi", "metric", "--json"], timeout=10.0)
    assert result.returncode == 2 and "no recorded output" in result.stderr


def test_fakenode_rejects_faults_it_cannot_apply(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown tools"):
        build_fake_node(tmp_path, SPEC, Faults(tools={"nvidia-smi": faults.missing()}))
    with pytest.raises(ValueError, match="grep"):
        build_fake_node(tmp_path, SPEC, Faults(tools={"grep": faults.hang()}))
    with pytest.raises(ValueError, match="missing binary"):
        Faults(tools={"lspci": ToolFault(kind=FaultKind.MISSING, argv_prefix=("-v",))})


def test_fakenode_port_down_shows_in_rdma_ibv_and_ib_write_bw(tmp_path: Path) -> None:
    runner = runner_for(tmp_path, faults.take_port_down(SPEC, nic=2))
    links = runner.run(["rdma", "link", "show"], timeout=10.0).stdout.splitlines()
    assert links[2] == "link ionic_2/1 state DOWN physical_state DISABLED netdev enp102s0np0 "
    assert all("state ACTIVE" in line for i, line in enumerate(links) if i != 2)
    ibv = runner.run(["ibv_devinfo", "-v"], timeout=10.0).stdout
    block = ibv.split("hca_id:\t")[3]
    assert block.startswith("ionic_2") and "PORT_DOWN (1)" in block and "DISABLED (3)" in block
    bw = runner.run(["ib_write_bw", "-d", "ionic_2", "--report_gbits", "peer"], timeout=10.0)
    assert bw.returncode == 1 and "Unable to Connect" in bw.stderr


def test_fakenode_empty_gid_table(tmp_path: Path) -> None:
    ibv = runner_for(tmp_path, faults.empty_gid_table(SPEC, nic=0)).run(["ibv_devinfo", "-v"], timeout=10.0).stdout
    blocks = ibv.split("hca_id:\t")[1:]
    assert "GID[" not in blocks[0] and "PORT_ACTIVE (4)" in blocks[0]
    assert all(b.count("GID[") == 4 for b in blocks[1:])


def test_fakenode_lost_vf_agrees_in_sysfs_and_lspci(tmp_path: Path) -> None:
    spec = faults.drop_vfs(_with_vfs(4), nic=1, lost=1)
    node = build_fake_node(tmp_path, spec)
    runner = LocalRunner(env=node.env(os.environ))
    files = [str(p) for p in sorted(node.host_root.glob("sys/bus/pci/devices/*/sriov_numvfs"))]
    grep = runner.run(["grep", "-H", ".", *files], timeout=10.0).stdout
    assert re.findall(r"devices/(\S+)/sriov_numvfs:(\d+)", grep)[1] == ("0000:16:00.0", "3")
    lspci = runner.run(["lspci", "-D", "-nn", "-vvv"], timeout=10.0).stdout
    assert re.findall(r"Number of VFs: (\d+)", lspci) == ["4", "3", "4", "4", "4", "4", "4", "4"]
    with pytest.raises(ValueError, match="cannot lose"):
        faults.drop_vfs(SPEC, nic=0, lost=1)


def test_fakenode_downgraded_links_show_in_lspci(tmp_path: Path) -> None:
    spec = faults.downgrade_nic_link(faults.downgrade_gpu_link(SPEC, gpu=3, width=8), nic=0, width=8, speed_gts=16.0)
    lspci = runner_for(tmp_path, spec).run(["lspci", "-D", "-nn", "-vvv"], timeout=10.0).stdout
    status = dict(re.findall(r"^(\S+) .*?\n(?:\t.*\n)*?\t\tLnkSta:\t(.*)$", lspci, re.M))
    assert status["0000:75:00.0"] == "Speed 32GT/s (ok), Width x8 (downgraded)"
    assert status["0000:06:00.0"] == "Speed 16GT/s (downgraded), Width x8 (downgraded)"
    assert status["0000:05:00.0"] == "Speed 32GT/s (ok), Width x16 (ok)"
    assert lspci.count("(downgraded)") == 3


def test_fakenode_failing_rvs_and_agfhc(tmp_path: Path) -> None:
    spec = faults.fail_agfhc(faults.fail_rvs(SPEC, gpu=5), "hbm_bw")
    runner = runner_for(tmp_path, spec)
    rvs = runner.run(
        ["rvs", "-c", "/opt/rocm/share/rocm-validation-suite/conf/MI300X/gst_single.conf", "-j"], timeout=10.0
    )
    verdicts = re.findall(r"\[GPU:: (\d+)\] GFLOPS \d+ Target GFLOPS: 639000 met: (TRUE|FALSE)", rvs.stdout)
    assert rvs.returncode == 1
    assert [v for _, v in verdicts].count("FALSE") == 1
    assert dict(verdicts)[str(SPEC.gpus[5].kfd_gpu_id)] == "FALSE"
    agfhc = runner.run(["agfhc", "-r", "all_lvl1"], timeout=10.0)
    assert agfhc.returncode == 1 and "    FAIL: hbm_bw-1-1" in agfhc.stdout and "PASS: xgmi_a2a-1-1" in agfhc.stdout
    healthy = runner_for(tmp_path / "ok")
    assert healthy.run(["rvs", "-c", "x.conf"], timeout=10.0).stdout.count("met: TRUE") == 8
    assert "AGFHC_SUCCESS [0]" in healthy.run(["agfhc", "-r", "all_lvl1"], timeout=10.0).stdout


def test_fakenode_injected_dmesg_event_names_the_node_gpus(tmp_path: Path) -> None:
    spec = faults.inject_dmesg_event(SPEC, DMESG_ACA_MODE1_RESET)
    dmesg = runner_for(tmp_path, spec).run(["dmesg"], timeout=10.0).stdout
    assert "uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT)" in dmesg and "MODE1 reset" in dmesg
    named = set(re.findall(r"amdgpu (0000:\S+):", dmesg))
    assert named == {g.bdf for g in SPEC.gpus}
    clean = runner_for(tmp_path / "clean").run(["dmesg"], timeout=10.0).stdout
    assert "Hardware Error" not in clean and clean.count("SRAM ECC is active.") == 8


def _with_vfs(count: int) -> NodeSpec:
    return replace(SPEC, nics=tuple(replace(n, sriov_numvfs=count) for n in SPEC.nics))
