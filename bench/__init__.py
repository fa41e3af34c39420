"""Benchmarks of upgrade-gate: speed, scale and detection power (results in bench/RESULTS.md).

Run everything with `python -m bench` (or `python bench/run_all.py`) from the repository root; each
part also runs alone (`python -m bench.bench_cli`, `bench.bench_snapshot`, `bench.bench_judge`,
`bench.bench_fleet`, `bench.detection`). Benchmarks never assert on time: they measure and report.
"""
