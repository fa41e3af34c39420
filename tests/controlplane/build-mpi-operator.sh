#!/usr/bin/env bash
# Builds the real Kubeflow MPI operator (github.com/kubeflow/mpi-operator, its own Go module, pinned below)
# once, into a cache outside the repository keyed by version, beside the control plane of build.sh, and
# copies the MPIJob CRD the same release ships. Prints the folder. Reuses what is already there.
#   tests/controlplane/build-mpi-operator.sh            # build (or reuse) and print the folder
#   tests/controlplane/build-mpi-operator.sh --print    # only print the folder (no build)
# The version is pinned in tests/controlplane/mpi-operator/go.mod (with go.sum): the module proxy refuses
# `@v/list` for this module, so `go install ...@version` (which reads it) cannot be used. That module is
# separate from tests/controlplane/go.mod because the operator pins k8s.io v0.34 and the control plane
# k8s.io/kubernetes v1.33.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)/mpi-operator"
version="$(awk '$1 == "require" && $2 == "github.com/kubeflow/mpi-operator" {print $3}' "$here/go.mod")"
dir="${UPGRADE_GATE_MPI_OPERATOR_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/upgrade-gate/mpi-operator-$version}"
if [ "${1:-}" = "--print" ]; then echo "$dir"; exit 0; fi
command -v go >/dev/null || { echo "build-mpi-operator.sh: go is not installed" >&2; exit 3; }
mkdir -p "$dir/bin"
if [ ! -x "$dir/bin/mpi-operator" ]; then
    start=$(date +%s)
    # stripped, no cgo, written to a temporary name and moved into place only once complete
    (cd "$here" && CGO_ENABLED=0 GOFLAGS=-trimpath go build -ldflags "-s -w" -o "$dir/bin/mpi-operator.tmp" \
        github.com/kubeflow/mpi-operator/cmd/mpi-operator)
    mv "$dir/bin/mpi-operator.tmp" "$dir/bin/mpi-operator"
    echo "build-mpi-operator.sh: mpi-operator $version built in $(( $(date +%s) - start ))s" >&2
fi
if [ ! -f "$dir/kubeflow.org_mpijobs.yaml" ]; then
    src="$(cd "$here" && go list -m -f '{{.Dir}}' github.com/kubeflow/mpi-operator)/manifests/base/kubeflow.org_mpijobs.yaml"
    cp "$src" "$dir/kubeflow.org_mpijobs.yaml.tmp" && mv "$dir/kubeflow.org_mpijobs.yaml.tmp" "$dir/kubeflow.org_mpijobs.yaml"
fi
echo "$dir"
