"""Phase tools of a fake node: rccl-tests sweeps, mpirun across hosts, ib_write_bw server and client."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.fakenode import NodeSpec, build_fake_node, faults, mi300x_node
from upgrade_gate.parse.bdf import PciAddress

FIXTURES = Path(__file__).parent / "fixtures" / "fakenode"
SWEEP = ["-b", "1K", "-e", "2G", "-f", "2", "-g", "8", "-n", "20", "-w", "5"]
_CELLS = r" +([\d.]+) +([\d.]+) +([\d.]+) +(\S+)"
ROW = re.compile(r"^ {0,11}(\d+) {2,}(\d+) +(\w+) +(\w+) +(-?\d+)" + _CELLS + _CELLS + "$")


def runner_for(root: Path, spec: NodeSpec) -> LocalRunner:
    return LocalRunner(env=build_fake_node(root, spec).env(os.environ))


def rows(text: str) -> list[tuple[str, ...]]:
    return [m.groups() for m in map(ROW.match, text.splitlines()) if m]


def avg_busbw(text: str) -> float:
    return float(re.search(r"^# Avg bus bandwidth    : ([\d.]+)$", text, re.M).group(1))  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> LocalRunner:
    return runner_for(tmp_path_factory.mktemp("phase"), mi300x_node("node-03", seed=3))


def test_fakenode_all_reduce_honours_the_sweep(node: LocalRunner) -> None:
    result = node.run(["all_reduce_perf", *SWEEP], timeout=30.0)
    assert result.ok, result.failure_reason()
    table = rows(result.stdout)
    assert [int(r[0]) for r in table] == [1024 << k for k in range(22)]
    assert all(
        int(r[1]) == int(r[0]) // 4 and r[2] == "float" and r[3] == "sum" and r[8] == r[12] == "0" for r in table
    )
    assert result.stdout.startswith(
        "# nThread 1 nGpus 8 minBytes 1024 maxBytes 2147483648 step: 2(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0\n#\nrccl-tests: Version develop:a7809b3\n# Using devices\n"
    )
    for size, _, _, _, _, time_us, algbw, busbw, *_ in table:
        assert float(algbw) == pytest.approx(int(size) / float(time_us) / 1e3, abs=0.011, rel=0.01)
        assert float(busbw) == pytest.approx(float(algbw) * 2 * 7 / 8, abs=0.02)
    mean = sum(float(r[7]) + float(r[11]) for r in table) / (2 * len(table))
    assert avg_busbw(result.stdout) == pytest.approx(mean, rel=1e-4)
    other = node.run(["all_reduce_perf", "-b", "8M", "-e", "128M", "-f", "4", "-g", "8"], timeout=30.0)
    assert [int(r[0]) for r in rows(other.stdout)] == [8 << 20, 32 << 20, 128 << 20]


def test_fakenode_all_reduce_table_layout_matches_the_capture(node: LocalRunner) -> None:
    corpus = (FIXTURES / "mi300x-8gpu-k8s-mpi-allreduce-develop-a7809b3.txt").read_text(encoding="utf-8")
    fake = node.run(["all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "8"], timeout=30.0).stdout

    def shape(text: str) -> list[str]:
        lines = [ln for ln in text.splitlines() if not ln.startswith("#  Rank") and not ln.startswith("# Avg")]
        return [re.sub(r"\d", "0", ln) if ROW.match(ln) else ln for ln in lines]

    assert len(shape(fake)) == len(shape(corpus))
    for fake_line, real_line in zip(shape(fake), shape(corpus), strict=True):
        assert fake_line == real_line.replace("nGpus 1", "nGpus 8")
    corpus_busbw = [float(r[7]) for r in rows(corpus)]
    fake_busbw = [float(r[7]) for r in rows(fake)]
    for real, mine in zip(corpus_busbw, fake_busbw, strict=True):
        assert mine == pytest.approx(real, rel=0.05, abs=0.02)


def test_fakenode_bandwidth_factor_lowers_busbw(tmp_path: Path) -> None:
    spec = mi300x_node("node-04", seed=4)
    healthy = runner_for(tmp_path / "a", spec).run(["all_reduce_perf", *SWEEP], timeout=30.0).stdout
    slow = runner_for(tmp_path / "b", faults.scale_mesh_bandwidth(spec, 0.8)).run(
        ["all_reduce_perf", *SWEEP], timeout=30.0
    )
    ratio = avg_busbw(slow.stdout) / avg_busbw(healthy)
    assert 0.77 < ratio < 0.83
    large = [
        float(b[7]) / float(a[7]) for a, b in zip(rows(healthy), rows(slow.stdout), strict=True) if int(a[0]) >= 1 << 26
    ]
    assert all(0.75 < r < 0.85 for r in large)


def test_fakenode_runs_differ_by_seeded_noise_only(node: LocalRunner) -> None:
    first = node.run(["all_reduce_perf", *SWEEP], timeout=30.0).stdout
    second = node.run(["all_reduce_perf", *SWEEP], timeout=30.0).stdout
    assert first != second
    assert avg_busbw(second) == pytest.approx(avg_busbw(first), rel=0.02)


def test_fakenode_rccl_device_lines_follow_enumeration_order(tmp_path: Path) -> None:
    spec = faults.reverse_enumeration(mi300x_node("node-05", seed=5))
    out = runner_for(tmp_path, spec).run(["all_reduce_perf", "-b", "1M", "-e", "1M", "-g", "8"], timeout=30.0).stdout
    assert re.findall(r"device +\d+ \[(\S+)\]", out) == [PciAddress.parse(g.bdf).slot_text for g in reversed(spec.gpus)]


def test_fakenode_json_output_is_refused(node: LocalRunner) -> None:
    result = node.run(["all_reduce_perf", *SWEEP, "-Z", "json"], timeout=30.0)
    assert result.returncode == 1 and "invalid option -- 'Z'" in result.stderr


def test_fakenode_mpirun_spreads_ranks_over_hosts(node: LocalRunner) -> None:
    argv = ["mpirun", "--allow-run-as-root", "-np", "16", "-H", "node-03:8,node-09:8", "-x", "NCCL_DEBUG=WARN",
            "all_gather_perf", "-b", "1M", "-e", "1G", "-f", "4", "-g", "1"]  # fmt: skip
    result = node.run(argv, timeout=30.0)
    assert result.ok, result.failure_reason()
    hosts = re.findall(r"^#  Rank +\d+ Group  0 Pid +\d+ on +(\S+) device", result.stdout, re.M)
    assert hosts == ["node-03"] * 8 + ["node-09"] * 8
    table = rows(result.stdout)
    assert [int(r[0]) for r in table] == [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]
    assert all(r[3] == "none" for r in table)
    for r in table:
        assert float(r[7]) == pytest.approx(float(r[6]) * 15 / 16, abs=0.02)


def test_fakenode_ib_write_bw_client_and_server(node: LocalRunner) -> None:
    client = node.run(
        ["ib_write_bw", "-d", "ionic_3", "-a", "--report_gbits", "-x", "1", "--use_rocm=0", "node-09"], timeout=30.0
    )
    assert client.ok, client.failure_reason()
    lines = client.stdout.splitlines()
    assert " Device         : ionic_3" in client.stdout.replace("OFF          Device", "Device").replace(
        " Dual-port       :", ""
    )
    assert " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]" in lines
    data = [ln for ln in lines if re.match(r" \d+ ", ln)]
    assert len(data) == 23 and data[-1].startswith(" 8388608    5000 ")
    assert all("\t\t     " in ln for ln in data)
    avg = float(data[-1].split()[3])
    assert avg == pytest.approx(391.34, rel=0.02)
    assert "Using ROCm Device with ID: 0, Name: AMD Instinct MI300X, PCI Bus ID: 0x5, GCN Arch: gfx942" in client.stdout
    server = node.run(["ib_write_bw", "-d", "ionic_3", "-a"], timeout=30.0)
    assert "* Waiting for client to connect... *" in server.stdout
    server_rows = [ln for ln in server.stdout.splitlines() if re.match(r" \d+ ", ln)]
    assert len(server_rows) == 1 and "BW average[MiB/sec]" in server.stdout
    assert float(server_rows[0].split()[3]) == pytest.approx(391.34e9 / 8 / 1048576, rel=0.02)


def test_fakenode_ib_write_bw_row_layout_matches_the_capture() -> None:
    corpus = (FIXTURES / "ib_write_bw-gdr-use_rocm-ionic0-client-a-MiB-mi355x.txt").read_text(encoding="utf-8")
    row = " %-7d    %-10d       %-7.2f            %-7.2f\t\t     %-7.6f"
    for line in corpus.splitlines():
        fields = line.split()
        if len(fields) == 5 and fields[0].isdigit():
            values = (int(fields[0]), int(fields[1]), float(fields[2]), float(fields[3]), float(fields[4]))
            assert (row % values).expandtabs(8) == line


def test_fakenode_rail_bandwidth_and_unknown_device(tmp_path: Path) -> None:
    spec = faults.set_rail_bandwidth(mi300x_node("node-06", seed=6), nic=4, gbps=200.0)
    runner = runner_for(tmp_path, spec)
    out = runner.run(["ib_write_bw", "-d", "ionic_4", "-s", "8388608", "--report_gbits", "peer"], timeout=30.0)
    data = [ln for ln in out.stdout.splitlines() if re.match(r" \d+ ", ln)]
    assert len(data) == 1 and float(data[0].split()[3]) == pytest.approx(200.0, rel=0.02)
    missing = runner.run(["ib_write_bw", "-d", "mlx5_0", "peer"], timeout=30.0)
    assert missing.returncode == 1 and "not found" in missing.stderr
