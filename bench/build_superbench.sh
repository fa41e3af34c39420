#!/usr/bin/env bash
# Build the peer benchmark tool SuperBench 0.12.0 (microsoft/superbenchmark) from an unpacked source
# tree into ~/.cache/superbench/venv, for `sb result diagnosis` in bench/bench_gate_scale.py.
# A bench extra only, never a dependency of this project.
#
# Usage: bench/build_superbench.sh SRC_DIR   (SRC_DIR: the unpacked SuperBench source; keep it, the
#        install is editable. Set SB_COMMIT to record the commit when SRC_DIR is not a git checkout.)
#
# Why --no-deps: setup.py requires `pssh @ git+https://github.com/lilydjwg/pssh.git`, and pip cannot
# reach GitHub here. So superbench goes in with --no-deps and its other requirements come from PyPI
# by name, pinned below to the versions of the build that worked (Python 3.11.7, 2026-12-06). pssh,
# tcping and types-requests are left out: only the runner and deploy commands use them.
set -euo pipefail

SRC=$(cd "${1:?usage: $0 SRC_DIR}" && pwd)
VENV="$HOME/.cache/superbench/venv"
PYTHON=${PYTHON:-python3}
BUILD=(pip==26.3 setuptools==84.2.1 setuptools-scm==10.3.4 vcs-versioning==2.6.0)
PINS=(
  ansible==12.3.0 ansible-core==2.19.14 ansible-runner==2.4.3 antlr4-python3-runtime==4.9.3
  argcomplete==3.7.2 attrs==26.1.0 certifi==2026.10.19.post1 cffi==2.1.1 charset-normalizer==3.5.3
  cloudpickle==3.1.3 colorlog==6.12.0 contourpy==1.3.3 cryptography==51.0.1 cycler==0.12.1
  et_xmlfile==2.0.0 fonttools==4.69.1 idna==3.21 importlib_metadata==10.2.0 Jinja2==3.1.6
  jmespath==1.1.0 joblib==1.6.0 jsonlines==4.0.0 kiwisolver==1.5.1 knack==0.14.0
  lazy-importer==0.1.0 lockfile==0.12.2 Markdown==3.11.3 MarkupSafe==3.0.4 matplotlib==3.11.2
  natsort==8.4.0 networkx==3.6.1 numpy==2.4.6 omegaconf==2.3.0 openpyxl==3.1.5 packaging==26.4
  pandas==3.1.1 pexpect==4.9.0 pillow==13.0.0 protobuf==7.36.2 ptyprocess==0.7.0 pycparser==3.12
  Pygments==2.21.0 pyparsing==3.3.3 python-daemon==3.1.2 python-dateutil==4.0.0 PyYAML==6.0.4
  requests==2.34.2 resolvelib==1.2.1 seaborn==0.13.2 tabulate==0.10.0 tzdata==2026.6
  urllib3==2.8.0 xlrd==2.0.2 xlsxwriter==3.3.1 xmltodict==1.0.4 zipp==4.1.2
)

version=$(sed -n "s/^__version__ = '\(.*\)'$/\1/p" "$SRC/superbench/__init__.py")
[[ $version == 0.12.0 ]] || { echo "$0: $SRC is SuperBench '$version'; these pins are for 0.12.0" >&2; exit 1; }
commit=$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo "${SB_COMMIT:-unknown}")
stamp="version=$version commit=$commit src=$SRC"

if [[ -x $VENV/bin/sb && "$(cat "$VENV/superbench-build.txt" 2>/dev/null)" == "$stamp" ]] \
   && "$VENV/bin/sb" result diagnosis --help >/dev/null 2>&1; then
  echo "superbench venv is current ($stamp)"
else
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q "${BUILD[@]}"
  "$VENV/bin/pip" install -q "${PINS[@]}"
  "$VENV/bin/pip" install -q --no-deps --no-build-isolation -e "$SRC"
  "$VENV/bin/sb" result diagnosis --help >/dev/null
  echo "$stamp" > "$VENV/superbench-build.txt"
  echo "built superbench venv ($stamp)"
fi
"$VENV/bin/python" --version
"$VENV/bin/pip" freeze --all
