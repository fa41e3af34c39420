"""Validate stage: the CVF phase pipeline (phases 0-5) and its executors.

Modules: `config` (CVF's cluster-validation-config ConfigMap as `CvfConfig`), `cvf` (label keys, values,
annotations), `phase` (the `NodePhase` / `GroupPhase` plugin protocols, contexts, `Outcome`),
`phases/` (one module per phase), `launcher` (`Launcher` and the local executor), `pipeline`
(`run_pipeline`: gating, budgets, progress).
"""
