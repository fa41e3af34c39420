"""Store stage: versioned baselines in a git repository (the only user of gitpython)."""
