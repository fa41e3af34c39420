"""upgrade-gate: snapshot, validate and judge GPU nodes through driver, ROCm and firmware changes."""

__version__ = "0.1.0"
