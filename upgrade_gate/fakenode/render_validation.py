"""Phase-1 outputs of a fake node: RVS (`rvs -g`, `rvs -c CONF`) and AGFHC (`agfhc -r RECIPE`).

Formats (sources in tests/fixtures/fakenode/PROVENANCE.md):
- `rvs -g`: the corpus RVS 1.1.0 listing of 8x MI300X ("GPU[%2d - %5d]", decimal device id).
- `rvs -c CONF`: the corpus gst excerpt of one MI300X repeated for every GPU in enumeration order with
  its KFD gpu id; timestamps keep RVS's quirk of printing the microseconds without zero padding,
  left-justified ("[  2456.47741 ]"). A failing GPU prints GFLOPS below the target and "met: FALSE".
- `agfhc -r RECIPE`: the corpus AGFHC 1.23.2 all_lvl1 pass output with product, GPU count and mode
  substituted.

UNVERIFIED (corpus INDEX "Not found in this round": no real RVS JSON log and no real AGFHC failure):
the failure forms are derived by analogy - a failing AGFHC test prints "FAIL:" where a pass prints
"PASS:", the summary says "<n> Tests Failed" and the last line "AGFHC_FAILURE [1]"; both tools then exit
1. RVS's `-j` JSON log is not produced; the text output is printed whatever `-j` says.
"""

from __future__ import annotations

from dataclasses import dataclass

from upgrade_gate.fakenode.spec import NodeSpec
from upgrade_gate.fakenode.templates import fill, fill_sequence, load_template

RVS_ACTION = "gst-639Tflops-4K4K8K-rand-fp16"
RVS_TARGET_GFLOPS = 639000
_RVS_GFLOPS = (738501, 736974, 738615, 733394, 734481, 738615)  # corpus excerpt, in order
_RVS_START_US = 2_455_547_500
_AGFHC_FAIL_SUMMARY = "{n} Tests Failed"
_AGFHC_FAIL_CODE = "AGFHC_FAILURE [1]"


@dataclass(frozen=True, slots=True, kw_only=True)
class Rendered:
    """A precomputed tool answer."""

    stdout: str
    exit_code: int = 0
    stderr: str = ""


def render_rvs_list(spec: NodeSpec) -> Rendered:
    """`rvs -g`."""
    line = load_template("rvs-list-gpu.txt")
    rows = "".join(
        fill(
            line,
            {
                "BDF": gpu.bdf,
                "NODE": f"{2 + index:2d}",
                "GPU_ID": f"{gpu.kfd_gpu_id:5d}",
                "MARKETING_NAME": gpu.market_name,
                "DEVICE_DEC": gpu.device_id,
            },
        )
        for index, gpu in enumerate(spec.enumerated_gpus)
    )
    return Rendered(stdout=fill(load_template("rvs-list.txt"), {"GPU_LINES": rows}))


def render_rvs_gst(spec: NodeSpec) -> Rendered:
    """`rvs -c CONF [-j]`: the gst action on every GPU."""
    clock = _RvsClock(_RVS_START_US)
    header = load_template("rvs-gst-header.txt").replace("{{ACTION}}", RVS_ACTION)
    parts = [fill_sequence(header, "TS", [clock.tick(17) for _ in range(2)])]
    block = load_template("rvs-gst-gpu.txt")
    failed = False
    for index, gpu in enumerate(spec.enumerated_gpus):
        bad = spec.gpus.index(gpu) in spec.rvs_failed_gpus
        failed = failed or bad
        scale = 0.8 if bad else 1.0 - 0.001 * (index % 3)
        gflops = [round(v * scale) for v in _RVS_GFLOPS]
        text = block.replace("{{ACTION}}", RVS_ACTION).replace("{{GPU_ID}}", str(gpu.kfd_gpu_id))
        text = fill_sequence(text, "TS", [clock.tick(3_100_000) for _ in range(block.count("{{TS}}"))])
        text = fill_sequence(text, "GFLOPS", [str(v) for v in (*gflops, max(gflops[1:]))])
        text = fill(text, {"TARGET": RVS_TARGET_GFLOPS, "MET": "TRUE" if not bad else "FALSE"})
        parts.append(text)
    return Rendered(stdout="".join(parts), exit_code=1 if failed else 0)


def render_agfhc(spec: NodeSpec) -> Rendered:
    """`agfhc -r RECIPE`: the all_lvl1 tests, failing the ones the spec names."""
    text = fill(
        load_template("agfhc-all_lvl1.txt"),
        {
            "PRODUCT": spec.gpus[0].market_name.split()[-1],
            "GPUS": len(spec.gpus),
            "COMPUTE_PARTITION": spec.compute_partition,
            "MEMORY_PARTITION": spec.memory_partition,
        },
    )
    for test in spec.agfhc_failed_tests:
        token = f"    PASS: {test}-1-1"
        if token not in text:
            raise ValueError(f"AGFHC recipe has no test {test!r}")
        text = text.replace(token, f"    FAIL: {test}-1-1")
    if not spec.agfhc_failed_tests:
        return Rendered(stdout=text)
    text = text.replace("All Tests Passed", _AGFHC_FAIL_SUMMARY.format(n=len(spec.agfhc_failed_tests)))
    text = text.replace("AGFHC_SUCCESS [0]", _AGFHC_FAIL_CODE)
    return Rendered(stdout=text, exit_code=1)


class _RvsClock:
    """RVS's "[%6d.%-6d]" timestamps (microseconds not zero-padded)."""

    def __init__(self, micros: int) -> None:
        self._micros = micros

    def tick(self, step: int) -> str:
        self._micros += step
        seconds, micros = divmod(self._micros, 1_000_000)
        return f"{seconds:6d}.{micros:<6d}"
