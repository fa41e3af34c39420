"""Collect stage: run probes through a `CommandRunner` and record them as capture bundles."""
