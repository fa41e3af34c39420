#!/usr/bin/env bash
# Builds the real control plane the fleet tests run against (kube-apiserver, kube-controller-manager,
# kube-scheduler) from the pinned k8s.io/kubernetes module in go.mod, once, into a cache outside the
# repository keyed by version. Prints the bin folder. Reuses what is already there.
#   tests/controlplane/build.sh            # build (or reuse) and print the folder
#   tests/controlplane/build.sh --print    # only print the folder (no build)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$here/go.mod")"
bin="${UPGRADE_GATE_K8S_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/upgrade-gate/k8s-$version/bin}"
if [ "${1:-}" = "--print" ]; then echo "$bin"; exit 0; fi
command -v go >/dev/null || { echo "build.sh: go is not installed" >&2; exit 3; }
mkdir -p "$bin"
minor="${version#v1.}"; minor="${minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
cd "$here"
for cmd in kube-apiserver kube-controller-manager kube-scheduler; do
    if [ -x "$bin/$cmd" ]; then continue; fi
    start=$(date +%s)
    # One binary at a time, stripped, no cgo: small and reproducible; the go build cache makes the
    # second and third binaries cheaper (they share most packages).
    CGO_ENABLED=0 GOFLAGS=-trimpath go build -ldflags "$ldflags" -o "$bin/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
    mv "$bin/$cmd.tmp" "$bin/$cmd"
    echo "build.sh: $cmd built in $(( $(date +%s) - start ))s" >&2
done
echo "$bin"
