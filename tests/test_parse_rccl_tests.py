"""rccl-tests / nccl-tests parser on the real corpus, the -Z json format, and measurement keys."""

from __future__ import annotations

import pytest

from tests.conftest import FIXTURES
from upgrade_gate.errors import ParseError
from upgrade_gate.model import replace
from upgrade_gate.parse import rccl_tests as rt

DIR = FIXTURES / "rccl-tests"
# Real outputs a parser must refuse (name -> message fragment); every other fixture has a golden.
REJECTED = {
    "mi355x-8gpu-allreduce-512K-16G-rows-elided-oci-doc.txt": "2 rows for float/sum; .* prints 16 per pass",
    "mi355x-8gpu-alltoall-512K-16G-rows-elided-oci-doc.txt": "2 rows for float/none; .* prints 16 per pass",
}
CASES = sorted(p for p in [*DIR.glob("*.txt"), *DIR.glob("*-from-source.json")] if p.name not in REJECTED)
GIB = 1 << 30


def _text(name: str) -> str:
    return (DIR / name).read_text(encoding="utf-8")


def _parse(name: str) -> rt.RcclTestsResult:
    return rt.parse_rccl_tests(_text(name))


def _busbw_at(result: rt.RcclTestsResult, size: int) -> float | None:
    """Out-of-place bus bandwidth (GB/s) of the first row of that size."""
    row = next((r for r in result.rows if r.size == size and r.out_of_place is not None), None)
    return row.out_of_place.busbw_gbs if row is not None and row.out_of_place is not None else None


def test_rccl_tests_header_devices_and_version_block() -> None:
    r = _parse("mi300x-2node-16rank-roce-allreduce-rocm6.4.2-rccl2.22.3.txt")
    assert r.settings is not None
    s = r.settings
    assert (s.n_threads, s.n_gpus, s.min_bytes, s.max_bytes) == (1, 1, 8, 17179869184)
    assert (s.step, s.step_kind, s.warmup_iters, s.iters, s.agg_iters, s.validation, s.graph) == (
        2,
        "factor",
        5,
        20,
        1,
        1,
        0,
    )
    assert r.ranks == 16 and r.tests_version == "develop:448c4c7"
    first, last = r.devices[0], r.devices[-1]
    assert (first.rank, first.group, first.host, first.bus_id, first.bdf) == (
        0,
        None,
        "gpu-53",
        "0000:05:00.0",
        "0000:05:00.0",
    )
    assert (last.rank, last.host, last.device, last.name) == (15, "gpu-56", 7, "AMD Instinct MI300X")
    assert r.versions["RCCL version"] == "2.22.3-HEAD:7d8d67c"
    assert r.versions["ROCm version"] == "6.4.2.0-120-e7d83f5"
    assert r.avg_busbw_gbs == pytest.approx(92.3318)
    assert _busbw_at(r, GIB) == pytest.approx(340.75)
    assert (r.out_of_bounds, r.out_of_bounds_ok, r.wrong_total) == (0, True, 0)


def test_rccl_tests_group_column_and_bdf_without_function() -> None:
    r = _parse("mi300x-8gpu-k8s-mpi-allreduce-develop-a7809b3.txt")
    dev = r.devices[3]
    assert (dev.group, dev.bus_id, dev.bdf) == (0, "0000:65:00", "0000:65:00.0")
    assert dev.host == "1942ef50-8240-449e-82ca-4ce7993f70b4-78bfb5d4f4-4z9xh"
    assert r.avg_busbw_gbs == pytest.approx(110.464)
    assert _busbw_at(r, GIB) == pytest.approx(313.66)
    row = r.rows[-1]
    assert (row.size, row.count, row.type, row.redop, row.root) == (8589934592, 2147483648, "float", "sum", -1)
    assert row.in_place is not None and row.in_place.busbw_gbs == pytest.approx(315.91)


def test_rccl_tests_degraded_mi350x_parses_with_the_drop() -> None:
    r = _parse("mi350x-8gpu-mpi-allreduce-rocm7.0-degraded-large-msgs.txt")
    assert _busbw_at(r, 64 << 20) == pytest.approx(78.87)
    assert _busbw_at(r, GIB) == pytest.approx(138.25)
    assert r.avg_busbw_gbs == pytest.approx(94.3116)
    assert r.tests_version == "Unknown" and len(r.rows) == 31


def test_rccl_tests_newer_layout_with_collective_name() -> None:
    r = _parse("mi355x-2node-16rank-ionic-allreduce-16G-rocm7.2.2-rccl2.27.7.txt")
    assert r.collective == "all_reduce_perf"
    assert r.tests_version is not None and r.tests_version.startswith("2.17.9-develop:4a65e8d")
    assert r.versions["HIP version"] == "7.2.53211-671d39a71e"
    assert _busbw_at(r, GIB) == pytest.approx(379.72)
    assert r.rows[-4].out_of_place is not None and r.rows[-4].out_of_place.time_us == pytest.approx(10580.6)


def test_rccl_tests_zero_size_rows_and_na_wrong() -> None:
    r = _parse("mi355x-8gpu-alltoall-zero-size-rows-radeon-graphics-name.txt")
    assert [row.size for row in r.rows[:5]] == [0, 0, 0, 0, 128]
    assert r.rows[0].in_place is not None and r.rows[0].in_place.wrong is None
    assert r.rows[0].out_of_place is not None and r.rows[0].out_of_place.wrong == 0
    assert r.collective == "alltoall_perf" and r.avg_busbw_gbs == pytest.approx(58.3947)
    keys = [m.key for m in rt.to_measurements(r, op="alltoall")]
    assert "mesh/alltoall/busbw/0" not in keys and keys[0] == "mesh/alltoall/busbw/128"


def test_rccl_tests_old_nccl_layout_skips_info_line_inside_table() -> None:
    r = _parse("nccl-tests-a100-8gpu-allreduce-nccl-info-line-inside-table.txt")
    assert r.settings is not None and r.settings.validation == 0 and r.settings.agg_iters is None
    assert len(r.rows) == 34 and r.rows[0].size == 0 and r.rows[0].root is None
    assert r.devices[0].bus_id == "0x00" and r.devices[0].bdf is None
    half = r.rows[-1].out_of_place
    assert half is not None and (half.wrong, half.max_error, half.busbw_gbs) == (None, None, 235.26)
    assert r.wrong_total is None
    assert _busbw_at(r, GIB) == pytest.approx(230.29)


def test_rccl_tests_error_column_values_and_asterisk() -> None:
    text = _text("nccl-tests-a100-8gpu-allreduce-nccl-info-line-inside-table.txt")
    text = text.replace("235.26    N/A", "235.26  2e-07*")
    half = rt.parse_rccl_tests(text).rows[-1].out_of_place
    assert half is not None and half.max_error == pytest.approx(2e-07) and half.flagged


def test_rccl_tests_header_glued_to_gfx942_notice() -> None:
    # rocm-systems common.cu prints the FNUZ notice without a newline before the header.
    text = "On gfx942 architecture, using FNUZ FP8 types" + _text("mi300x-8gpu-k8s-mpi-allreduce-develop-a7809b3.txt")
    assert rt.parse_rccl_tests(text).avg_busbw_gbs == pytest.approx(110.464)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace("# Avg bus bandwidth    : 110.464\n", ""), "no '# Avg bus bandwidth' footer"),
        (lambda t: t.replace("# nThread", "# nThreads"), "no '# nThread"),
        (
            lambda t: t.replace("        1024           256", "host: Test NCCL failure common.cu:1\n        1024  256"),
            "unexpected line inside the results table",
        ),
        (lambda t: t.replace("      0    17.24", "      0    17.24  extra"), "row has 14 cells, header has 13"),
        (lambda t: t.replace("-1    19.28", "-1    x19.28"), "bad time value"),
        (lambda t: t.replace("[0000:05:00]", "[0000:05:zz]"), "not a PCI address"),
    ],
)
def test_rccl_tests_rejects_broken_output(edit: object, message: str) -> None:
    text = _text("mi300x-8gpu-k8s-mpi-allreduce-develop-a7809b3.txt")
    assert callable(edit)
    with pytest.raises(ParseError, match=message):
        rt.parse_rccl_tests(edit(text))


def test_rccl_tests_to_measurements_keys_units_and_settings() -> None:
    r = _parse("mi300x-8gpu-k8s-mpi-allreduce-develop-a7809b3.txt")
    ms = rt.to_measurements(r, env={"NCCL_ALGO": "Ring", "HOME": "/root"})
    by_key = {m.key: m for m in ms}
    assert len(ms) == 63  # 31 sizes out-of-place + 31 in-place + avg
    one_gib = by_key[f"mesh/all_reduce/busbw/{GIB}"]
    assert one_gib.samples == (pytest.approx(313.66),) and one_gib.unit == "GB/s"
    # the in-place half of the same row: "5996.4  179.06  313.36" (issue 10: both halves are recorded)
    in_place = by_key[f"mesh/all_reduce/busbw_inplace/{GIB}"]
    assert in_place.samples == (pytest.approx(313.36),) and in_place.settings == one_gib.settings
    assert by_key["mesh/all_reduce/avg_busbw"].samples == (pytest.approx(110.464),)
    assert one_gib.settings == {
        "min_bytes": "8",
        "max_bytes": "8589934592",
        "step_factor": "2",
        "iters": "20",
        "warmup_iters": "5",
        "ranks": "8",
        "datatype": "float",
        "op": "sum",
        "NCCL_ALGO": "Ring",
    }
    cluster = rt.to_measurements(r, prefix="cluster", op="all_gather")
    assert cluster[-1].key == "cluster/all_gather/avg_busbw"


def test_rccl_tests_json_array_and_lines_from_source() -> None:
    text_r = _parse("mi300x-8gpu-k8s-mpi-allreduce-develop-a7809b3.txt")
    for name in ("mi300x-8gpu-allreduce-array-from-source.json", "mi300x-8gpu-allreduce-jsonl-from-source.json"):
        js = _parse(name)
        assert js.source_format == "json" and js.settings is None
        assert (js.ranks, js.collective, len(js.rows)) == (8, "AllReduce", 31)
        assert _busbw_at(js, GIB) == pytest.approx(313.66) and js.wrong_total == 0
        with pytest.raises(ParseError, match="no sweep settings"):
            rt.to_measurements(js)
        merged = rt.merge_json(text_r, js)
        assert merged.source_format == "text+json"
        assert [m.samples for m in rt.to_measurements(merged)] == [m.samples for m in rt.to_measurements(text_r)]


def test_rccl_tests_merge_json_rejects_other_sweep() -> None:
    other = _parse("mi350x-8gpu-mpi-allreduce-rocm7.0-degraded-large-msgs.txt")
    js = _parse("mi300x-8gpu-allreduce-array-from-source.json")
    with pytest.raises(ParseError, match="disagrees with the text table"):
        rt.merge_json(other, js)  # same sizes, other numbers: the files belong to different runs
    with pytest.raises(ParseError, match="do not match"):
        rt.merge_json(_parse("mi300x-2node-16rank-roce-allreduce-rocm6.4.2-rccl2.22.3.txt"), js)


def test_rccl_tests_json_rejects_bad_records() -> None:
    with pytest.raises(ParseError, match="bad rccl-tests JSON record"):
        rt.parse_rccl_tests('[{"size": 8}]')
    with pytest.raises(ParseError, match="invalid JSON"):
        rt.parse_rccl_tests('[{"size": 8, "time": inf}]')


def test_rccl_tests_to_measurements_refuses_mixed_datatypes() -> None:
    # A `-d all` run holds one full sweep per datatype; one mixed result must not become one measurement
    # set. (Editing a single row's type in the text is now rejected earlier, as an incomplete sweep.)
    result = _parse("mi300x-8gpu-k8s-mpi-allreduce-develop-a7809b3.txt")
    half = tuple(replace(r, type="half") for r in result.rows)
    mixed = replace(result, rows=result.rows + half)
    with pytest.raises(ParseError, match="mixes datatypes"):
        rt.to_measurements(mixed)


def test_rccl_tests_edited_row_type_is_an_incomplete_sweep() -> None:
    text = _text("mi300x-8gpu-k8s-mpi-allreduce-develop-a7809b3.txt")
    text = text.replace("          16             4     float", "          16             4      half")
    with pytest.raises(ParseError, match="31 per pass"):
        rt.parse_rccl_tests(text)


def test_rccl_tests_sweep_steps_follow_the_tool_loop() -> None:
    base = rt.SweepSettings(
        n_threads=1, n_gpus=8, min_bytes=524288, max_bytes=17179869184, step=2, step_kind="factor",
        warmup_iters=5, iters=20,
    )  # fmt: skip
    assert rt.sweep_steps(base) == 16
    assert rt.sweep_steps(replace(base, min_bytes=8, max_bytes=8589934592)) == 31
    assert rt.sweep_steps(replace(base, max_bytes_reduced_to=1073741824)) == 12
    by_bytes = replace(base, min_bytes=1310720000, max_bytes=1310720000, step=1048576, step_kind="bytes")
    assert rt.sweep_steps(by_bytes) == 1
    assert rt.sweep_steps(replace(base, min_bytes=0)) is None  # 0 * factor never ends: no claim
    assert rt.sweep_steps(replace(by_bytes, step=0)) is None


def test_rccl_tests_every_corpus_table_covers_its_sweep() -> None:
    for path in CASES:
        result = rt.parse_rccl_tests(path.read_text(encoding="utf-8"))
        if result.settings is None:
            continue  # JSON-only: no sweep header to check against
        steps = rt.sweep_steps(result.settings)
        assert steps is not None and len(result.rows) % steps == 0, path.name


def test_rccl_tests_json_names_still_exported_from_the_main_module() -> None:
    from upgrade_gate.parse import rccl_tests_json

    assert rt.merge_json is rccl_tests_json.merge_json
    assert rt.parse_rccl_tests_json is rccl_tests_json.parse_rccl_tests_json


def test_rccl_tests_one_size_table_is_a_whole_sweep_of_one_row() -> None:
    # issue 14: the phases re-measure a size in doubt alone (`-b X -e X`); a real one-size run (nccl-tests'
    # defaults -b 32M -e 32M, the same options and layout as rccl-tests) parses to that size's measurements
    result = _parse("nccl-tests-a100-4gpu-allgather-one-size-32M-readme.txt")
    assert result.settings is not None
    assert (result.settings.min_bytes, result.settings.max_bytes) == (32 << 20, 32 << 20)
    assert rt.sweep_steps(result.settings) == 1 and len(result.rows) == 1
    got = {m.key: m.samples for m in rt.to_measurements(result, prefix="mesh", op="all_gather")}
    assert got == {
        "mesh/all_gather/busbw/33554432": (25.86,),
        "mesh/all_gather/busbw_inplace/33554432": (25.95,),
        "mesh/all_gather/avg_busbw": (25.905,),
    }
