"""The fake `amd-smi monitor -p -t`: power and temperatures per GPU, as phase 2's thermal sampling reads them.

Layout (no capture of exactly `-p -t` exists; the columns are the corpus captures' own):
- header and cells are right-justified the way amdsmi_commands.py `monitor` builds them (`GPU`, then
  `"XCP".rjust(5)`, `"POWER".rjust(7)`, `"PWR_CAP".rjust(9)`, `"GPU_T".rjust(8)`, `"MEM_T".rjust(8)`),
  which is byte for byte the layout of amd-smi/mi350x-8gpu-monitor-putm-rocm7.0.txt for these columns;
- a node in a compute-partition mode gets the `XCP` column and prints N/A for every partition but the
  first of each device, as amd-smi/monitor-mi300x-cpx-nps4-doc-example.txt shows;
- values are whole numbers with units ("705 W", "63 °C"), as in every capture.
Values come from the spec's `ThermalProfile` (per device slot in BDF order, cycling), plus `hot`
(faults.run_hot). The output is the state under load: the fake has no idle state.

The rocm-smi fallback (`render_rocmsmi_thermal`) prints the JSON keys of the corpus' rocm-smi captures
(rocm-smi/mi100-6gpu-json-all-rocm5.7.1-telegraf.json: "PCI Bus" upper-case, "Temperature (Sensor
junction) (C)", values as strings with one decimal); power under the ROCm 6 MI300 key "Current Socket
Graphics Package Power (W)" (rocm_smi.py; no capture), the edge sensor 12 °C under the junction.
"""

from __future__ import annotations

import json

from upgrade_gate.fakenode.spec import GpuSpec, NodeSpec


def _slot(spec: NodeSpec, gpu: GpuSpec) -> int:
    devices = sorted({g.bdf.rsplit(".", 1)[0] for g in spec.gpus})
    return devices.index(gpu.bdf.rsplit(".", 1)[0])


def render_amdsmi_monitor(spec: NodeSpec) -> str:
    """`amd-smi monitor -p -t` for `spec` (rows in amd-smi's enumeration order)."""
    profile = spec.thermal
    partitioned = any(g.partition is not None for g in spec.gpus)
    hot = dict(profile.hot)
    header = "GPU" + ("XCP".rjust(5) if partitioned else "")
    header += "POWER".rjust(7) + "PWR_CAP".rjust(9) + "GPU_T".rjust(8) + "MEM_T".rjust(8)
    lines = [header]
    for index, gpu in enumerate(spec.enumerated_gpus):
        row = str(index).rjust(3)
        if partitioned:
            row += str(gpu.partition or 0).rjust(5)
        if gpu.partition not in (None, 0):
            row += "N/A".rjust(7) + "N/A".rjust(9) + "N/A".rjust(8) + "N/A".rjust(8)
        else:
            slot = _slot(spec, gpu)
            hotspot = profile.hotspot_c[slot % len(profile.hotspot_c)] + hot.get(slot, 0.0)
            memory = profile.memory_c[slot % len(profile.memory_c)] + hot.get(slot, 0.0) / 2
            power = profile.power_w[slot % len(profile.power_w)]
            row += f"{power} W".rjust(7) + f"{profile.power_cap_w} W".rjust(9)
            row += f"{round(hotspot)} \N{DEGREE SIGN}C".rjust(8) + f"{round(memory)} \N{DEGREE SIGN}C".rjust(8)
        lines.append(row)
    return "\n".join(lines) + "\n"


def render_rocmsmi_thermal(spec: NodeSpec) -> str:
    """`rocm-smi --showbus --showtemp --showpower --json` for `spec` (the keys of the corpus' rocm-smi JSON)."""
    profile = spec.thermal
    hot = dict(profile.hot)
    cards: dict[str, dict[str, str]] = {}
    for index, gpu in enumerate(spec.enumerated_gpus):
        if gpu.partition not in (None, 0):
            junction = memory = edge = power = "N/A"
        else:
            slot = _slot(spec, gpu)
            extra = hot.get(slot, 0.0)
            junction = f"{profile.hotspot_c[slot % len(profile.hotspot_c)] + extra:.1f}"
            edge = f"{profile.hotspot_c[slot % len(profile.hotspot_c)] - 12 + extra:.1f}"
            memory = f"{profile.memory_c[slot % len(profile.memory_c)] + extra / 2:.1f}"
            power = f"{profile.power_w[slot % len(profile.power_w)]:.1f}"
        cards[f"card{index}"] = {
            "PCI Bus": gpu.bdf.upper(),
            "Temperature (Sensor edge) (C)": edge,
            "Temperature (Sensor junction) (C)": junction,
            "Temperature (Sensor memory) (C)": memory,
            "Current Socket Graphics Package Power (W)": power,
        }
    return json.dumps(cards) + "\n"
