"""Break test 2026-12-07 of the workload phases (6, 7) and the `workload.*` rules (issue 29): each finding
of /tmp/brk16/workload as a test. Site commands and hand-built evidence only: no PyTorch training here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.judge_scenarios import NOW, judge_one, mi300x_snapshot, upgraded
from tests.test_validate_support import fast_config, launcher_for, make_node, snapshot_of
from tests.test_workload_parse import MAP, START, _lines, _run, _step
from tests.workload_support import with_workload
from upgrade_gate.errors import ParseError
from upgrade_gate.fakenode import FakeNode, mi300x_node
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import NodeName, PhaseResult, PhaseStatus, Severity, Snapshot, replace
from upgrade_gate.parse.workload import MAX_STEPS, parse_workload, scan_collective_log
from upgrade_gate.snapshot.io import load_snapshot, write_snapshot
from upgrade_gate.validate.phases import select_phases
from upgrade_gate.validate.pipeline import run_pipeline

# A site's workload: prints a contract for the GPUs it is given (argv[2], in enumeration order) as a runtime
# would see them under the visible-device variable argv[3]. argv[1]: "bdf" (rank r on the r-th visible GPU by
# bus id, the shipped script's default), "index" (rank r on visible index r), "ignore" (as "bdf", but the
# variable never reaches it: a wrapper that sets the list itself), "noindex" (as "bdf", no `index` printed),
# or "print:FILE" (prints FILE's lines as they are).
SITE = """
import json, os, sys
mode, gpus, var = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
if mode.startswith("print:"):
    sys.stdout.write(open(mode[6:], encoding="utf-8").read())
    sys.exit(0)
raw = os.environ.get(var) if mode != "ignore" else None
visible = [gpus[int(i)] for i in raw.split(",")] if raw else list(gpus)
def rec(o):
    print(json.dumps(o), flush=True)
world = len(gpus)
rec({"record": "start", "contract": 1, "world_size": world, "backend": "nccl", "device": "cuda",
     "precision": "bf16", "model": "site", "batch_size": 8, "steps": 3, "warmup": 1})
ranks = []
for r in range(world):
    bdf = visible[r] if mode == "index" else sorted(visible)[r]
    entry = {"rank": r, "bdf": bdf, "uuid": "GPU-" + bdf}
    if mode != "noindex":
        entry["index"] = visible.index(bdf)
    ranks.append(entry)
rec({"record": "device_map", "ranks": ranks})
for i in range(3):
    rec({"record": "step", "step": i, "loss": 2.0 - i * 0.1, "step_time_s": 0.1, "samples_per_s": world * 80.0,
         "warmup": i == 0})
    if i == 0:
        rec({"record": "init", "init_s": 1.0})
rec({"record": "end", "steps": 3})
"""


def _node(root: Path, gpus: int = 4) -> tuple[FakeNode, Snapshot]:
    node = make_node(root, mi300x_node("node-01", seed=1, gpu_count=gpus, nic_count=0))
    return node, snapshot_of(node)


def _enumerated(snap: Snapshot) -> str:
    return ",".join(str(g.bdf) for g in sorted(snap.gpus, key=lambda g: g.index))


def _phases(root: Path, snap: Snapshot, node: FakeNode, phases: set[int], command: str, **config: str) -> list:  # type: ignore[type-arg]
    return list(
        run_pipeline(
            [node.spec.name],
            phases=select_phases(frozenset(phases)),
            config=fast_config(UPGRADE_GATE_WORKLOAD_COMMAND=command, **config),
            launcher=launcher_for(node),
            snapshots={node.spec.name: snap},
        )[NodeName(node.spec.name)]
    )


def _site(root: Path, mode: str, snap: Snapshot, var: str = "HIP_VISIBLE_DEVICES", prefix: str = "") -> str:
    script = root / "site.py"
    script.write_text(SITE, encoding="utf-8")
    return f"{prefix}{sys.executable} {script} {mode} {_enumerated(snap)} {var}"


# 01: deeply nested JSON


def test_brk16_deep_json_is_a_parse_error_naming_the_line() -> None:
    deep = json.dumps(START)[:-1] + ', "config": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(ParseError, match="nested too deeply") as err:
        parse_workload(deep + "\n" + _run().split("\n", 1)[1])
    assert err.value.line_no == 1


# 02: a site command that pins the visible list itself; a runtime that never saw the permutation


def test_brk16_perturbation_refuses_a_command_that_sets_the_variable_itself(tmp_path: Path) -> None:
    node, snap = _node(tmp_path)
    command = _site(tmp_path, "index", snap, prefix="env HIP_VISIBLE_DEVICES=0,1,2,3 ")
    (seven,) = _phases(tmp_path, snap, node, {7}, command)
    assert seven.status is PhaseStatus.ERROR, seven.reasons
    assert "sets HIP_VISIBLE_DEVICES=0,1,2,3 itself" in (seven.reason or "")


@pytest.mark.parametrize("gpus", [4, 2])
def test_brk16_perturbation_that_never_reached_the_runtime_is_an_error(tmp_path: Path, gpus: int) -> None:
    """A wrapper that sets the list inside (nothing in the command to see): the device map's `index`
    shows the unpermuted enumeration; 2 GPUs: both permutations are `1,0`, the snapshot's order says it."""
    node, snap = _node(tmp_path, gpus)
    (seven,) = _phases(tmp_path, snap, node, {7}, _site(tmp_path, "ignore", snap))
    assert seven.status is PhaseStatus.ERROR, seven.reasons
    assert "permutation did not reach the workload's runtime" in (seven.reason or "")


@pytest.mark.parametrize(("mode", "gpus"), [("bdf", 4), ("index", 4), ("bdf", 2), ("index", 2)])
def test_brk16_perturbation_that_reached_the_runtime_passes(tmp_path: Path, mode: str, gpus: int) -> None:
    node, snap = _node(tmp_path, gpus)
    six, seven = _phases(tmp_path, snap, node, {6, 7}, _site(tmp_path, mode, snap))
    assert six.status is seven.status is PhaseStatus.PASSED, (six.reasons, seven.reasons)
    moved = {d.bdf for d in seven.device_map} != {d.bdf for d in six.device_map} or any(
        a.bdf != b.bdf for a, b in zip(six.device_map, seven.device_map, strict=False)
    )
    assert moved is (mode == "index")  # workload.index_dependent judges the index-bound one


def test_brk16_perturbation_without_index_in_the_map_passes_with_a_note(tmp_path: Path) -> None:
    node, snap = _node(tmp_path)
    (seven,) = _phases(tmp_path, snap, node, {7}, _site(tmp_path, "noindex", snap))
    assert seven.status is PhaseStatus.PASSED, seven.reasons
    assert any("not verified" in r for r in seven.reasons), seven.reasons


# 11: an NVIDIA node told to permute ROCR_VISIBLE_DEVICES, which CUDA never reads


def test_brk16_nvidia_node_refuses_a_variable_cuda_does_not_read(tmp_path: Path) -> None:
    from tests.test_workload_util_nvidia import _nvidia

    node, snap = _nvidia(tmp_path)
    command = _site(tmp_path, "bdf", snap, var="CUDA_VISIBLE_DEVICES")
    (seven,) = _phases(tmp_path, snap, node, {7}, command, UPGRADE_GATE_WORKLOAD_VISIBLE_VAR="ROCR_VISIBLE_DEVICES")
    assert seven.status is PhaseStatus.ERROR, seven.reasons
    assert "ROCR_VISIBLE_DEVICES: the NVIDIA runtime does not read it" in (seven.reason or "")
    assert "CUDA_VISIBLE_DEVICES" in (seven.reason or "")


def test_brk16_nvidia_index_dependent_hint_names_cudas_variable(tmp_path: Path) -> None:
    from tests.test_workload_util_nvidia import _nvidia

    _, snap = _nvidia(tmp_path)
    cand = with_workload(snap, perturbed_order=[7, 6, 5, 4, 3, 2, 1, 0])
    report = judge(baselines={}, candidates=[cand], plan=None, policy=load_policy(), now=NOW)
    hints = {f.hint for f in report.findings if f.rule == "workload.index_dependent"}
    assert hints and all(h is not None and "CUDA_VISIBLE_DEVICES to UUIDs" in h for h in hints), hints
    assert not any("ROCR" in (h or "") for h in hints)


# 06 and 03: stalled steps; a step time the rate does not show


def _with_rates(snap: Snapshot, rates: list[float]) -> Snapshot:
    def swap(result: PhaseResult) -> PhaseResult:
        ms = tuple(
            replace(m, samples=tuple(rates)) if m.key == "workload/samples_per_s" else m for m in result.measurements
        )
        return replace(result, measurements=ms)

    return replace(snap, phases=tuple(swap(p) if p.phase == 6 else p for p in snap.phases))


def _throughput(cand: Snapshot) -> list[tuple[Severity, str]]:
    report = judge_one(cand, with_workload(mi300x_snapshot()))
    return [(f.severity, f.message) for f in report.findings if f.rule == "workload.throughput"]


@pytest.mark.parametrize(
    ("rates", "change"),
    [
        ([400.0 if i % 2 else 1528.0 for i in range(25)], "-57.6%"),  # 12 of 25 steps at 400 samples/s
        ([60.0 if i in (3, 8, 13, 18, 23) else 1528.0 for i in range(25)], "-8"),  # 5 steps stall ~4 s
    ],
    ids=["alternating", "stalls"],
)
def test_brk16_stalled_steps_block_on_the_total_time(rates: list[float], change: str) -> None:
    ((severity, message),) = _throughput(_with_rates(with_workload(upgraded(), seed=2), rates))
    assert severity is Severity.BLOCK and "over the measured steps' total time" in message and change in message


def test_brk16_one_slow_step_of_a_healthy_run_passes() -> None:
    six = next(p for p in with_workload(upgraded(), seed=2).phases if p.phase == 6)
    rates = list(next(m for m in six.measurements if m.key == "workload/samples_per_s").samples)
    rates[7] /= 2  # a garbage-collection pause: -4% over the total
    assert _throughput(_with_rates(with_workload(upgraded(), seed=2), rates)) == []


def test_brk16_rate_that_disagrees_with_the_step_time_is_refused() -> None:
    slow = _run().replace('"step_time_s": 0.1', '"step_time_s": 0.24')  # 2 x 8 / 0.24 = 66.7, not 160
    with pytest.raises(ParseError, match=r"samples_per_s 160, but world_size 2 x batch_size 8 / step_time_s 0.24"):
        parse_workload(slow)
    # rounding as reference_train.py prints it (6 decimals of the time, 3 of the rate) passes
    fast = (
        _run()
        .replace('"step_time_s": 0.1', '"step_time_s": 3e-06')
        .replace('"samples_per_s": 160.0', '"samples_per_s": 5333333.333')
    )
    assert len(parse_workload(fast).measured) == 3


# 04: warm-up flags on more steps than the start record declares


def test_brk16_warmup_flags_must_be_the_declared_first_steps() -> None:
    with pytest.raises(ParseError, match="3 steps flagged warm-up, the start record's warmup is 1"):
        parse_workload(_run().replace('"warmup": false', '"warmup": true', 2))
    later = [dict(_step(i), warmup=i in (0, 3)) for i in range(4)]
    text = _lines(START, MAP, later[0], {"record": "init", "init_s": 1.5}, *later[1:], {"record": "end", "steps": 4})
    with pytest.raises(ParseError, match="step 3 is flagged warm-up after a measured step"):
        parse_workload(text)


# 05: the collective log's real wordings (PyTorch's ProcessGroupNCCL.cpp, NCCL)

TIMEOUTS = (
    "[rank1]:[E1003 18:37:01.833621509 ProcessGroupNCCL.cpp:1709] [PG 0 (default_pg) Rank 1] Timeout at NCCL "
    "work: 6463, last enqueued NCCL work: 6463, last completed NCCL work: 6462.",
    "[rank3]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 3] Heartbeat monitor timed out! Process will be terminated "
    "after dumping debug info. workMetaList_.size()=2",
    "Original reason for aborting was: watchdog callback timed out",
)
ERRORS = (
    "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 2.",
    "ncclUnhandledCudaError: Call to CUDA function failed.",
    "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
    "torch.distributed.DistBackendError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] "
    "via c10d key-value store by key '0', but store->get('0') got error: Socket Timeout",
    "[rank0]:[E ProcessGroupNCCL.cpp:1182] [Rank 0] NCCL watchdog thread terminated with exception: CUDA error: an "
    "illegal memory access was encountered",
    "gpu-node-01:1234:1290 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<52102> with status=12 opcode=0 "
    "len=0 vendor err 129 (Recv)",
)


@pytest.mark.parametrize("line", TIMEOUTS)
def test_brk16_log_scan_knows_the_timeout_wordings(line: str) -> None:
    assert scan_collective_log(line + "\n").timeouts == (line,)


@pytest.mark.parametrize("line", ERRORS)
def test_brk16_log_scan_knows_the_error_wordings(line: str) -> None:
    assert scan_collective_log(line + "\n").errors == (line,)


def test_brk16_log_scan_leaves_healthy_lines_alone() -> None:
    healthy = (
        "gpu-node-01:1234:1290 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.0.0.1<0>\n"
        "ncclInProgress\nNCCL INFO comm 0x55 rank 0 nranks 8 - Init COMPLETE\n"
    )
    assert scan_collective_log(healthy) == scan_collective_log("")


# 07 and 09: a contract the snapshot could not hold; the phase errors and the snapshot is written


def _printed(root: Path, lines: list[str]) -> tuple[PhaseResult, Path]:
    node, snap = _node(root, 2)
    out = root / "contract.jsonl"
    out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    (six,) = _phases(root, snap, node, {6}, _site(root, f"print:{out}", snap))
    path = root / "snap.json"
    write_snapshot(replace(snap, phases=(six,)), path)
    assert load_snapshot(path).phases[0].status is six.status
    return six, path


def test_brk16_lone_surrogate_is_refused_and_the_snapshot_is_written(tmp_path: Path) -> None:
    lines = _run().splitlines()
    lines[1] = lines[1].replace('"GPU-a"', '"GPU-\\ud800f57c"')
    with pytest.raises(ParseError, match="lone UTF-16 surrogate") as err:
        parse_workload("\n".join(lines))
    str(err.value).encode("utf-8")
    raw = "\n".join(lines).replace("\\ud800", "\ud800")  # the surrogate itself in the text (surrogateescape)
    with pytest.raises(ParseError) as err2:
        parse_workload(raw)
    str(err2.value).encode("utf-8")
    six, _ = _printed(tmp_path, lines)
    assert six.status is PhaseStatus.ERROR and "lone UTF-16 surrogate" in (six.reason or ""), six.reasons


def test_brk16_too_many_steps_is_an_error_and_the_snapshot_is_written(tmp_path: Path) -> None:
    n = MAX_STEPS + 10
    start = dict(START, steps=n)
    steps = [json.dumps(_step(i)) for i in range(n)]
    lines = [json.dumps(start), json.dumps(MAP), steps[0], json.dumps({"record": "init", "init_s": 1.5}), *steps[1:]]
    lines.append(json.dumps({"record": "end", "steps": n}))
    with pytest.raises(ParseError, match=f"more than {MAX_STEPS} steps"):
        parse_workload("\n".join(lines))
    six, _ = _printed(tmp_path, lines)
    assert six.status is PhaseStatus.ERROR and f"more than {MAX_STEPS} steps" in (six.reason or ""), six.reasons


# 08: a key named twice in one record


def test_brk16_duplicate_keys_are_refused_naming_the_key() -> None:
    lines = _run().splitlines()
    lines[4] = lines[4][:-1] + ', "loss": "NaN"}'
    with pytest.raises(ParseError, match="key 'loss' named twice") as err:
        parse_workload("\n".join(lines))
    assert err.value.line_no == 5
