"""Judge stage: diff, change plan, policy, rules, checklists, verdict. Pure: no I/O beyond loading documents.

Modules (imported directly; this package imports nothing, so `--help` stays fast):
- `judge.judge`: `judge(...) -> GateReport`, the pure entry point.
- `judge.diff`: `diff_snapshots(baseline, candidate) -> tuple[Change, ...]` (the only deepdiff user).
- `judge.identity`: GPU matching by serial, unique id, then BDF (unverified).
- `judge.plan`: `ChangePlan`, `load_plan`, what a plan explains or accepts.
- `judge.policy`: `Policy`, `RuleEntry`, `Thresholds`, `load_policy` (CVF ConfigMap thresholds too).
- `judge.rules`: the closed rule set, one module per family, `REGISTRY`.
- `judge.stats`: the bandwidth decision (Hodges-Lehmann drop, one-sided Mann-Whitney, scipy).
- `judge.checklist`: pre-change / canary / observe checklists, attestations.
- `judge.causes`: the findings grouped into root causes (with `cause_groups`, `cause_text`); shown, not decided.
"""
