"""The vendor seam (issue 30): each vendor is one value naming its probes, parsers, pins, fake shapes and
phase commands; the probe catalogue is the one source of probe facts, checked against the parser registry."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

from upgrade_gate.cli.collect_cmds import parser_check
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.probes import (
    CATALOGUE,
    absent_warns_names,
    catalogue,
    fallback_names,
    optional_names,
    probe_catalogue,
    probe_names,
)
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.errors import UsageError
from upgrade_gate.fakenode import build_fake_node, mi300x_node
from upgrade_gate.model import replace
from upgrade_gate.parse.registry import all_parsers
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.vendors import AMD, NVIDIA, VENDORS, Vendor, vendor_named, vendor_of


@pytest.mark.parametrize("vendor", VENDORS, ids=lambda v: v.name)
def test_vendor_catalogue_parser_keys_are_registered(vendor: Vendor) -> None:
    parsers = all_parsers()
    for spec in catalogue(vendor):
        # abi-list is upgrade-gate's own ELF reader (upgrade_gate.abi.listing), not a tool-output parser
        assert spec.parser in parsers or spec.parser == "abi-list", (spec.name, spec.parser)


@pytest.mark.parametrize("vendor", VENDORS, ids=lambda v: v.name)
def test_vendor_catalogue_names_are_unique_and_hold_the_vendor_marker(vendor: Vendor) -> None:
    names = probe_names(vendor)
    assert len(names) == len(set(names))
    assert vendor.marker_probe in names
    assert set(vendor.anchor_probes) <= set(names)


def test_vendor_amd_catalogue_is_the_default_catalogue() -> None:
    assert catalogue(AMD) == CATALOGUE and probe_names() == probe_names(AMD)


def test_vendor_fallbacks_and_optional_probes_are_derived_from_the_catalogue() -> None:
    assert fallback_names(AMD) == {"rocmsmi", "rocmsmi_topo"}
    assert optional_names(AMD) == {"rocmsmi", "rocmsmi_topo", "amdsmi_version", "rocm_libs"}
    assert fallback_names(NVIDIA) == frozenset()
    assert optional_names(NVIDIA) == {"nvidia_smi_nvlink"}
    assert absent_warns_names(AMD) == {"rocm_libs"} and absent_warns_names(NVIDIA) == {"nvidia_smi_nvlink"}


def test_vendor_nvidia_probes_read_nvidia_files(tmp_path: Path) -> None:
    (tmp_path / "sys/module/nvidia").mkdir(parents=True)
    (tmp_path / "sys/module/nvidia/version").write_text("570.124.06\n")
    probes = {p.name: p for p in probe_catalogue(tmp_path, vendor=NVIDIA)}
    assert probes["nvidia_smi"].argv == ("nvidia-smi", "-q", "-x")
    assert probes["dmesg"].parser == "dmesg-nvidia"
    assert probes["driver_version"].argv[-1] == str(tmp_path / "sys/module/nvidia/version")
    assert not any(n.startswith(("rocm", "amdsmi")) for n in probes)


def test_vendor_of_reads_the_marker_probe() -> None:
    assert vendor_of(["nvidia_smi", "lspci"]) is NVIDIA
    assert vendor_of(["rocminfo", "lspci"]) is AMD
    assert vendor_of([]) is AMD  # bundles from before the seam


def test_vendor_named_refuses_an_unknown_vendor() -> None:
    assert vendor_named("nvidia") is NVIDIA
    with pytest.raises(UsageError, match="--vendor intel: expected one of amd, nvidia"):
        vendor_named("intel")


@pytest.mark.parametrize("vendor", VENDORS, ids=lambda v: v.name)
def test_vendor_fake_shapes_exist(vendor: Vendor) -> None:
    assert vendor.fake_shapes
    for dotted in vendor.fake_shapes:
        module, _, name = dotted.rpartition(".")
        assert callable(getattr(importlib.import_module(module), name)), dotted


def test_vendor_order_pin_in_each_vendors_words() -> None:
    uuids = ["GPU-1", "GPU-0"]
    assert AMD.order_pin(uuids) == "export ROCR_VISIBLE_DEVICES=GPU-1,GPU-0"
    assert NVIDIA.order_pin(uuids) == "export CUDA_DEVICE_ORDER=PCI_BUS_ID; export CUDA_VISIBLE_DEVICES=GPU-1,GPU-0"


def test_vendor_amd_bundle_lacking_a_probe_keeps_its_old_verdicts(tmp_path: Path) -> None:
    # Absent from the bundle: a fallback is normal, rocm_libs (newer than some bundles) warns, and every other
    # probe blocks - amdsmi_version too, although its failure only warns (an old bundle is no excuse).
    node = build_fake_node(tmp_path / "node", mi300x_node("gpu-node-01", seed=1))
    bundle = capture(
        LocalRunner(env=node.env(os.environ)),
        node="gpu-node-01",
        host_root=node.host_root,
        output_check=parser_check(),
    )
    dropped = {"amdsmi_version", "rocm_libs", "bios"}
    snap = build_snapshot(replace(bundle, records=tuple(r for r in bundle.records if r.name not in dropped)))
    absent = {p.name: p.required for p in snap.probes if p.reason and "absent from the capture bundle" in p.reason}
    assert absent == {"amdsmi_version": True, "rocm_libs": False, "bios": True}
    assert not any(p.name.startswith("rocmsmi") for p in snap.probes)  # fallbacks not needed: not listed
