"""`upgrade-gate demo`: the whole story of a gated ROCm change, offline, on a fake 8-node MI300X fleet.

`run_demo` (in `story`) plays it; `fleet` builds and examines the fake nodes through the real capture,
snapshot and validation code; `plan` writes and reads the change plan; `canaries` picks the canaries.
The CLI command lives in `upgrade_gate.cli.demo_cmd`.
"""

from upgrade_gate.demo.story import DemoOutcome, run_demo

__all__ = ["DemoOutcome", "run_demo"]
