"""Where the shipped data folders live: `schemas/` and `checklists/` at the top of the repository.

One copy of each, found the same way by every install:
- a source checkout (tests with PYTHONPATH, `pip install -e .`): the package runs from
  `<checkout>/upgrade_gate`, so the folders are its siblings, `<checkout>/schemas` and `<checkout>/checklists`;
- a wheel (`pip install .`): the build maps them into the package as `upgrade_gate/_schemas` and
  `upgrade_gate/_checklists` (`[tool.setuptools.package-dir]` in pyproject.toml, listed by setup.py),
  because a wheel cannot install top-level data folders next to a package.

The in-package name is looked for first: a checkout never has it (it is not a folder in git), and an
installed package never has siblings of its own (`site-packages/schemas` would be another project's).
"""

from __future__ import annotations

import functools
from pathlib import Path

FOLDERS = ("schemas", "checklists")


@functools.cache
def folder(name: str) -> Path:
    """The shipped folder `name` ("schemas" or "checklists"); RuntimeError if the install lacks it."""
    if name not in FOLDERS:
        raise ValueError(f"no shipped folder {name!r}")
    package = Path(__file__).resolve().parent
    for candidate in (package / f"_{name}", package.parent / name):
        if candidate.is_dir():
            return candidate
    raise RuntimeError(f"the shipped folder {name}/ is missing from this install of upgrade_gate ({package})")
