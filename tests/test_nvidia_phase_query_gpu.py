"""`nvidia-smi --query-gpu=... --format=csv,noheader,nounits`: phase 2's thermal sample on NVIDIA nodes."""

from __future__ import annotations

import pytest

from upgrade_gate.errors import ParseError
from upgrade_gate.parse.nvidia_smi_query import ARGV, parse_nvidia_smi_query_gpu
from upgrade_gate.parse.registry import all_parsers

GOOD = (
    "0, 00000000:1B:00.0, 33, 41, 69.85\n1, 00000000:43:00.0, 34, N/A, [N/A]\n"
    "2, 00000000:52:00.0, 35, 40, [Not Supported]\n"
)


def test_query_gpu_reads_values_and_not_available_forms() -> None:
    result = parse_nvidia_smi_query_gpu(GOOD)
    assert [(g.index, g.bdf) for g in result.gpus] == [(0, "0000:1b:00.0"), (1, "0000:43:00.0"), (2, "0000:52:00.0")]
    first, second, third = result.gpus
    assert (first.temperature_c, first.memory_temperature_c, first.power_w) == (33.0, 41.0, 69.85)
    assert (second.memory_temperature_c, second.power_w) == (None, None)
    assert third.power_w is None


def test_query_gpu_is_registered_and_argv_names_the_fields_in_order() -> None:
    assert "nvidia-smi-query-gpu" in all_parsers()
    assert ARGV == (
        "nvidia-smi",
        "--query-gpu=index,pci.bus_id,temperature.gpu,temperature.memory,power.draw",
        "--format=csv,noheader,nounits",
    )


def test_query_gpu_strips_ansi_remnants() -> None:
    assert parse_nvidia_smi_query_gpu("\x1b[0m" + GOOD).gpus[0].temperature_c == 33.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty output"),
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure", "driver"),
        ("No devices were found\n", "no devices"),
        ("Failed to initialize NVML: Driver/library version mismatch\n", "version mismatch"),
        ("index, pci.bus_id, temperature.gpu, temperature.memory, power.draw [W]\n" + GOOD, "names line"),
        ("0, 00000000:1B:00.0, 33, 41, 69.85 W\n", "has a unit"),
        ("0, 00000000:1B:00.0, [Unknown Error], 41, 69.85\n", r"error text '\[Unknown Error\]'"),
        ("0, 00000000:1B:00.0, 33, 41, [GPU requires reset]\n", "error text"),
        ("0, 00000000:1B:00.0, 33, 41\n", "4 fields, expected 5"),
        ("0, 00000000:1B:00.0, 33,\n 41, 69.85\n", "fields, expected 5"),
        ("0, 00000000:1B:00.0, 33, 41, 69.85\n0, 00000000:43:00.0, 33, 41, 69.85\n", "GPU 0 printed twice"),
        ("0, 00000000:1B:00.0, 33, 41, 69.85\n1, 00000000:1b:00.0, 33, 41, 69.85\n", "printed twice"),
        ("$ nvidia-smi --query-gpu=index\n" + GOOD, "fields, expected 5"),
        ("0, 00000000:1B:00.0, hot, 41, 69.85\n", "not a number"),
    ],
)
def test_query_gpu_refuses_each_form_by_name(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_nvidia_smi_query_gpu(text)
