"""Package list for setuptools: the package's folders plus the two top-level data folders.

pyproject.toml cannot combine package discovery with extra mapped packages, so the list is built here;
the mapping itself (schemas/ -> upgrade_gate/_schemas, checklists/ -> upgrade_gate/_checklists) and the
package data are in pyproject.toml. `upgrade_gate.shipped` finds the folders in a checkout and in a wheel.
"""

from setuptools import find_namespace_packages, setup

MAPPED = ["upgrade_gate._schemas", "upgrade_gate._checklists"]
FOUND = find_namespace_packages(include=["upgrade_gate", "upgrade_gate.*"], exclude=["*.__pycache__", *MAPPED])

setup(packages=[*FOUND, *MAPPED])
