#!/usr/bin/env bash
# Proves that `pip install .` into a fresh venv finds the top-level schemas/ and checklists/ (shipped
# inside the wheel as upgrade_gate/_schemas and upgrade_gate/_checklists): installs this checkout into a
# new venv, then, from a directory with no checkout in sight, runs a schema-loading command and the demo.
# Then the same for an editable install. Needs the package index (build isolation and the dependencies).
# Usage: tools/check_install.sh [VENV]   (VENV and VENV-editable are created)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$(mktemp -d)/venv}"
python3 -m venv "$venv"
"$venv/bin/pip" install -q "$repo"
work="$(mktemp -d)"
cd "$work"
"$venv/bin/python" - <<'PY'
from upgrade_gate import schemas, shipped
from upgrade_gate.judge.checklist import SHIPPED, load_checklist

folder = shipped.folder("schemas")
assert folder.parent.name == "upgrade_gate" and folder.name == "_schemas", folder
assert "site-packages" in str(folder), folder
print("schemas:", folder, schemas.schema_names())
print("checklists:", shipped.folder("checklists"), [load_checklist(n).name for n in SHIPPED])
PY
"$venv/bin/upgrade-gate" demo --healthy --workdir "$work/demo" > "$work/demo.log" 2>&1 && rc=0 || rc=$?
tail -3 "$work/demo.log"
echo "upgrade-gate demo exit code: $rc"
test "$rc" -eq 0
# The editable install (`pip install -e .`, as CI and the tests use) reads the checkout's own folders.
"$venv-editable/bin/python" -V >/dev/null 2>&1 || python3 -m venv "$venv-editable"
"$venv-editable/bin/pip" install -q --no-deps -e "$repo"
REPO="$repo" "$venv-editable/bin/python" - <<'PY'
import os
from pathlib import Path

from upgrade_gate import schemas, shipped

repo = Path(os.environ["REPO"])
assert shipped.folder("schemas") == repo / "schemas" and shipped.folder("checklists") == repo / "checklists"
print("editable:", shipped.folder("schemas"), schemas.load_schema("snapshot")["title"])
PY
rm -rf "$repo/build" "$repo/upgrade_gate.egg-info"  # what the in-tree builds left behind
