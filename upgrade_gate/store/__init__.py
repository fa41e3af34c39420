"""Store stage: versioned baselines in a git repository (the only user of gitpython)."""

import os as _os

# Without a git binary on PATH, gitpython refuses to import with a 15-line message. Quiet refresh lets
# it import; the store then fails at first use with one line (`gitstore`, exit 4).
_os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
