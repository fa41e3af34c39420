#!/usr/bin/env bash
# Proves that `pip install .` into a fresh venv finds the top-level schemas/ and checklists/ (shipped
# inside the wheel as upgrade_gate/_schemas and upgrade_gate/_checklists): installs this checkout into a
# new venv, then, from a directory with no checkout in sight, runs a schema-loading command and the demo.
# Needs the package index (build isolation and the dependencies). Usage: tools/check_install.sh [VENV]
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
