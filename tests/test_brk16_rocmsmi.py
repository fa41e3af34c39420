"""Break-test findings on the rocm-smi fallback (issue 29): real rocm-smi outputs, mutated minimally, that
used to resolve silently to one value (a duplicate card, a block printed twice under two spellings, a
non-finite reading) now refuse with a ParseError naming what disagrees; the fallback capture reads VBIOS.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.capture_support import healthy_capture, stdout_of, with_stdout
from tests.conftest import FIXTURES
from upgrade_gate.cli.collect_cmds import parser_check
from upgrade_gate.collect.bundle import Bundle
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.runner import CommandResult, LocalRunner
from upgrade_gate.errors import ParseError
from upgrade_gate.fakenode import Faults, build_fake_node, faults, mi300x_node
from upgrade_gate.fakenode.render_gpu import render_rocmsmi
from upgrade_gate.model import replace
from upgrade_gate.parse.rocmsmi import parse_rocmsmi
from upgrade_gate.parse.rocmsmi_thermal import parse_rocmsmi_thermal
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.validate.phases.thermal import ROCMSMI_ARGV as THERMAL_ARGV
from upgrade_gate.validate.phases.thermal import ThermalRecord, take_sample
from upgrade_gate.vendors.amd import ROCMSMI_ARGV

MI100 = FIXTURES / "rocm-smi" / "mi100-6gpu-json-all-rocm5.7.1-telegraf.json"
FRU_TEXT = FIXTURES / "rocm-smi" / "mi210x3-mi50-mi100-mixed-5gpu-showallinfo-fru-corrupt-rocm5.4.txt"


def _mi100() -> dict[str, dict[str, str]]:
    doc: dict[str, dict[str, str]] = json.loads(MI100.read_text(encoding="utf-8"))
    return doc


def _dump(doc: dict[str, dict[str, str]]) -> str:
    return "\n" + json.dumps(doc, indent=4) + "\n"  # rocm-smi's own layout (the corpus file's)


def _with_duplicate_card(doc: dict[str, dict[str, str]], card: str, **changes: str) -> dict[str, dict[str, str]]:
    """`doc` with a copy of `card` printed again as the next card number, `changes` applied to the copy."""
    cards = [k for k in doc if k.startswith("card")]
    out = {k: v for k, v in doc.items() if k != "system"}
    out[f"card{len(cards)}"] = {**doc[card], **changes}
    out["system"] = doc["system"]
    return out


# --- 02: a duplicate cardN on one PCI Bus -------------------------------------------------------------


def test_brk16_rocmsmi_json_two_cards_on_one_bus_is_a_parse_error() -> None:
    doc = _with_duplicate_card(_mi100(), "card0", **{"SMC firmware version": "00.54.30.00"})
    with pytest.raises(ParseError, match=r"card0 and card6 both print PCI Bus 0000:1e:00\.0"):
        parse_rocmsmi(_dump(doc))


def test_brk16_rocmsmi_json_identical_duplicate_card_is_still_refused() -> None:
    with pytest.raises(ParseError, match="both print PCI Bus"):
        parse_rocmsmi(_dump(_with_duplicate_card(_mi100(), "card3")))


def test_brk16_rocmsmi_text_two_gpus_on_one_bus_is_a_parse_error() -> None:
    text = FRU_TEXT.read_text(encoding="utf-8")
    parsed = parse_rocmsmi(text)
    first, second = parsed.gpus[0], parsed.gpus[1]
    assert first.bdf is not None and second.bdf is not None
    bus1 = next(line for line in text.splitlines() if line.startswith("GPU[1]") and "PCI Bus:" in line)
    bus0 = next(line for line in text.splitlines() if line.startswith("GPU[0]") and "PCI Bus:" in line)
    with pytest.raises(ParseError, match="GPU 0 and GPU 1 both print PCI Bus"):
        parse_rocmsmi(text.replace(bus1, bus1.split("PCI Bus:")[0] + "PCI Bus:" + bus0.split("PCI Bus:")[1]))


def test_brk16_rocmsmi_duplicate_card_blocks_the_fallback_snapshot(tmp_path: Path) -> None:
    bundle = _fallback_capture(tmp_path)
    doc = json.loads(stdout_of(bundle, "rocmsmi"))
    snap = build_snapshot(with_stdout(bundle, "rocmsmi", _dump(_with_duplicate_card(doc, "card0"))))
    probe = next(p for p in snap.probes if p.name == "rocmsmi")
    assert not probe.ok and "card0 and card8 both print PCI Bus 0000:05:00.0" in (probe.reason or ""), probe
    assert all(not g.firmware and "firmware" in g.na_reasons for g in snap.gpus)  # no card's values stand in


# --- 03 / 04: one firmware block printed twice under two names -----------------------------------------


def test_brk16_rocmsmi_fw_block_case_variant_with_another_value_is_a_parse_error() -> None:
    doc = _mi100()
    doc["card0"]["smc firmware version"] = "00.54.29.01"  # printed: "SMC firmware version": "00.54.29.00"
    with pytest.raises(ParseError, match="printed twice with different values"):
        parse_rocmsmi(_dump(doc))


def test_brk16_rocmsmi_fw_block_case_variant_with_the_same_value_is_one_block() -> None:
    doc = _mi100()
    doc["card0"]["smc firmware version"] = doc["card0"]["SMC firmware version"]
    gpu = parse_rocmsmi(_dump(doc)).gpus[0]
    assert [b for b in gpu.firmware if b.upper() == "SMC"] == ["SMC"]


def test_brk16_rocmsmi_fw_alias_of_the_same_amdsmi_block_with_another_value_is_a_parse_error() -> None:
    doc = _mi100()
    doc["card0"]["PM firmware version"] = "00.54.28.00"  # amd-smi's name of rocm-smi's SMC block
    both = r"'SMC firmware version' and 'PM firmware version' name one block \(amd-smi's firmware PM\)"
    with pytest.raises(ParseError, match=both):
        parse_rocmsmi(_dump(doc))


def test_brk16_rocmsmi_fw_alias_with_the_same_version_is_accepted() -> None:
    doc = _mi100()
    doc["card0"]["PM firmware version"] = "00.54.29.00"  # the same number in amd-smi's PM format
    assert parse_rocmsmi(_dump(doc)).gpus[0].firmware["SMC"] == "00.54.29.00"


# --- 05: the fallback capture reads VBIOS -------------------------------------------------------------


def test_brk16_rocmsmi_fallback_probe_asks_for_vbios() -> None:
    assert "--showvbios" in ROCMSMI_ARGV


def test_brk16_rocmsmi_corpus_json_vbios_is_read() -> None:
    assert {g.vbios for g in parse_rocmsmi(MI100.read_text(encoding="utf-8")).gpus} == {"113-D3430400-037"}


def test_brk16_rocmsmi_fake_node_prints_vbios_as_rocm_smi_does() -> None:
    spec = mi300x_node("n", seed=1)
    doc = json.loads(render_rocmsmi(spec))
    assert [doc[f"card{i}"]["VBIOS version"] for i in range(8)] == [g.vbios for g in spec.enumerated_gpus]


def _fallback_capture(root: Path, **vbios: str) -> Bundle:
    spec = mi300x_node("gpu-node-01", seed=1)
    if vbios:
        spec = replace(spec, gpus=tuple(replace(g, **vbios) for g in spec.gpus))
    node = build_fake_node(root / "node", spec, Faults(tools={"amd-smi": faults.missing()}))
    return capture(
        LocalRunner(env=node.env(os.environ)), node="gpu-node-01", host_root=node.host_root, output_check=parser_check()
    )


def test_brk16_rocmsmi_fallback_snapshot_holds_vbios_and_sees_a_reflash(tmp_path: Path) -> None:
    before = build_snapshot(_fallback_capture(tmp_path / "a"))
    after = build_snapshot(_fallback_capture(tmp_path / "b", vbios="113-M3000100-103", ifwi_version="00160001"))
    spec = mi300x_node("gpu-node-01", seed=1)
    assert [g.vbios for g in before.gpus] == [g.vbios for g in spec.enumerated_gpus]
    assert {g.vbios for g in after.gpus} == {"113-M3000100-103"}
    assert all("vbios" not in g.na_reasons for g in before.gpus)


# --- 06 / 11: thermal sampling through rocm-smi ----------------------------------------------------------


def _thermal_doc() -> dict[str, dict[str, str]]:
    return {k: v for k, v in _mi100().items() if k.startswith("card")}


def test_brk16_rocmsmi_thermal_two_cards_on_one_bus_is_a_parse_error() -> None:
    doc = _thermal_doc()
    doc["card6"] = {**doc["card3"], "Temperature (Sensor junction) (C)": "30.0"}
    with pytest.raises(ParseError, match=r"card3 and card6 both print PCI Bus 0000:43:00\.0"):
        parse_rocmsmi_thermal(_dump(doc))


@pytest.mark.parametrize("value", ["NaN", "nan", "inf", "-Infinity"])
@pytest.mark.parametrize(
    "key",
    ["Temperature (Sensor junction) (C)", "Temperature (Sensor memory) (C)", "Average Graphics Package Power (W)"],
)
def test_brk16_rocmsmi_thermal_non_finite_reading_is_a_parse_error(key: str, value: str) -> None:
    doc = _thermal_doc()
    doc["card3"][key] = value
    with pytest.raises(ParseError, match=rf"expected a finite number at .*card3: {re.escape(key.lower())}"):
        parse_rocmsmi_thermal(_dump(doc))


class _Replay:
    """A CommandRunner that answers every command with one output."""

    def __init__(self, stdout: str) -> None:
        self.stdout = stdout

    def run(self, argv: tuple[str, ...], *, timeout: float) -> CommandResult:
        return CommandResult(argv=argv, returncode=0, stdout=self.stdout, stderr="", duration_s=0.1)


@pytest.mark.parametrize("mutation", ["duplicate", "nan"])
def test_brk16_rocmsmi_thermal_sample_fails_closed(mutation: str) -> None:
    doc = _thermal_doc()
    if mutation == "nan":
        doc["card3"]["Temperature (Sensor junction) (C)"] = "NaN"
    else:
        doc["card6"] = {**doc["card3"], "Temperature (Sensor junction) (C)": "30.0"}
    sample = take_sample(_Replay(_dump(doc)), ThermalRecord(tool=THERMAL_ARGV), "before", 30.0)  # type: ignore[arg-type]
    assert sample.error is not None and sample.error.startswith("rocm-smi: unreadable output"), sample
    assert not sample.readings


def test_brk16_rocmsmi_healthy_fallback_capture_still_parses(tmp_path: Path) -> None:
    bundle = healthy_capture(tmp_path)
    assert build_snapshot(bundle).gpus  # the amd-smi path is untouched
