"""parse.workload: the workload contract read strictly, and the NCCL/RCCL log scan on real wordings."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from upgrade_gate.errors import ParseError
from upgrade_gate.parse.workload import parse_workload, scan_collective_log

FIXTURES = Path(__file__).parent / "fixtures" / "workload"
START = {
    "record": "start", "contract": 1, "world_size": 2, "backend": "gloo", "device": "cpu", "precision": "bf16",
    "model": "resnet-w16-b1", "batch_size": 8, "steps": 4, "warmup": 1, "seed": 1234,
}  # fmt: skip
MAP = {"record": "device_map", "ranks": [
    {"rank": 0, "bdf": "0000:05:00.0", "uuid": "GPU-a"}, {"rank": 1, "bdf": "0000:15:00.0", "uuid": "GPU-b"}
]}  # fmt: skip


def _step(i: int, loss: object = 2.3) -> dict[str, object]:
    return {"record": "step", "step": i, "loss": loss, "step_time_s": 0.1, "samples_per_s": 160.0, "warmup": i < 1}


def _lines(*records: dict[str, object]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def _run(**loss: object) -> str:
    steps = [_step(i, loss.get(str(i), 2.3 - i * 0.1)) for i in range(4)]
    return _lines(START, MAP, steps[0], {"record": "init", "init_s": 1.5}, *steps[1:], {"record": "end", "steps": 4})


def test_workload_parse_complete_run() -> None:
    run = parse_workload(_run())
    assert run.world_size == 2 and run.init_s == 1.5
    assert [d.bdf for d in run.devices] == ["0000:05:00.0", "0000:15:00.0"]
    assert [s.step for s in run.measured] == [1, 2, 3]
    assert run.settings["precision"] == "bf16" and run.settings["world_size"] == "2"


def test_workload_parse_non_finite_loss_is_a_value() -> None:
    run = parse_workload(_run(**{"2": "NaN"}))
    assert math.isnan(run.steps[2].loss)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "printed nothing"),
        ("\x7fELF\x02\x01garbage\n", "not a JSON line"),
        (_run()[: len(_run()) // 2], "not a JSON line"),  # cut in the middle of a record
        (_run().rsplit("\n", 2)[0] + "\n", "no end record"),
        (_run().replace('"loss": 2.3', '"loss": NaN'), "bare NaN"),
        (_run().replace('"step": 2', '"step": 3'), "step 3 where step 2 was due"),
        (_run().replace('"record": "init"', '"record": "hello"'), "not a contract record"),
        (_lines(_step(0)), "before the start record"),
        (_run().replace('"world_size": 2', '"world_size": 3'), "device_map names 2 ranks, world_size is 3"),
        (_run().replace('"warmup": false', '"warmup": true'), "no step after warm-up"),
        (_run().replace('"samples_per_s": 160.0', '"samples_per_s": -1', 1), "not a positive number"),
        ("torchrun banner\n" + _run(), "not a JSON line"),
    ],
    ids=[
        "nothing",
        "garbage",
        "truncated",
        "no-end",
        "bare-nan",
        "order",
        "unknown",
        "no-start",
        "ranks",
        "no-measured",
        "negative",
        "banner",
    ],
)
def test_workload_parse_refuses_what_the_contract_does_not_say(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_workload(text)


def test_workload_log_scan_real_wordings() -> None:
    log = scan_collective_log((FIXTURES / "pytorch-nccl-watchdog-timeout.log").read_text(encoding="utf-8"))
    assert len(log.timeouts) == 2 and "Watchdog caught collective operation timeout" in log.timeouts[0]
    assert "watchdog got stuck for 300 seconds" in log.timeouts[1]
    assert len(log.errors) == 2 and "Exception (either an error or timeout)" in log.errors[0]
    assert len(log.warnings) == 1 and 'NCCL WARN Missing "iommu=pt"' in log.warnings[0]
    assert scan_collective_log("W1205 site-packages/torch/distributed/run.py:982] OMP_NUM_THREADS\n").timeouts == ()
