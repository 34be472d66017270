#!/bin/sh
# Builds the Kubernetes, etcd and cri-tools commands that peapod's tests run, from the Go modules
# pinned in k8s/go.mod, into a cache keyed by the pinned versions (and this script): a second run
# with nothing changed is a no-op. Prints the cache's bin directory on its last line.
#
#   k8s/build.sh            build what is missing, print the bin directory
#   k8s/build.sh --print    only print the bin directory (exit 1 when it is not complete)
#
# Beside bin/, src/ holds the few files of the Kubernetes source the node e2e harness needs.
#
# The cache lives under $PEAPOD_K8S_CACHE (default /var/cache/peapod/k8s), outside the work
# tree, so that `git clean` and fresh clones on the same machine reuse it.
set -eu
cd "$(dirname "$0")"

version_of() { awk -v m="$1" '$1 == m { print $2; exit }' go.mod; }
K8S_VERSION=$(version_of k8s.io/kubernetes)
ETCD_VERSION=$(version_of go.etcd.io/etcd/server/v3)
CRI_TOOLS_VERSION=$(version_of sigs.k8s.io/cri-tools)
key="$K8S_VERSION-$(cat go.mod go.sum build.sh | sha256sum | cut -c1-12)"
cache="${PEAPOD_K8S_CACHE:-/var/cache/peapod/k8s}/$key"
bin="$cache/bin"
# The files of the Kubernetes source that scripts/node-e2e builds the suite's images from (agnhost's
# test certificate, the kitten and nautilus web servers' files), copied out of Go's module cache,
# which CI empties once the tools are built (.ci/run).
src="$cache/src"
SOURCE_FILES="test/images/agnhost/porter/localhost.crt
test/images/agnhost/porter/localhost.key
test/images/kitten/html/kitten.jpg
test/images/kitten/html/data.json
test/images/nautilus/html/nautilus.jpg
test/images/nautilus/html/data.json"

# The commands and test binaries, as file name and Go package.
COMMANDS="kubelet:k8s.io/kubernetes/cmd/kubelet
kube-apiserver:k8s.io/kubernetes/cmd/kube-apiserver
kube-controller-manager:k8s.io/kubernetes/cmd/kube-controller-manager
kube-scheduler:k8s.io/kubernetes/cmd/kube-scheduler
kubectl:k8s.io/kubernetes/cmd/kubectl
agnhost:k8s.io/kubernetes/test/images/agnhost
etcd:go.etcd.io/etcd/server/v3
crictl:sigs.k8s.io/cri-tools/cmd/crictl
ginkgo:github.com/onsi/ginkgo/v2/ginkgo
sample-device-plugin:k8s.io/kubernetes/test/images/sample-device-plugin"
TESTS="e2e_node.test:k8s.io/kubernetes/test/e2e_node
critest:sigs.k8s.io/cri-tools/cmd/critest"

complete() {
    for entry in $COMMANDS $TESTS; do
        [ -x "$bin/${entry%%:*}" ] || return 1
    done
    for f in $SOURCE_FILES; do
        [ -f "$src/$f" ] || return 1
    done
}

if [ "${1:-}" = --print ]; then
    complete && { echo "$bin"; exit 0; }
    exit 1
fi
if complete; then
    echo "$bin"
    exit 0
fi

command -v go >/dev/null 2>&1 || { echo "k8s/build.sh: go not found (Go 1.26 is needed)" >&2; exit 1; }
mkdir -p "$bin"
started=$(date +%s)

# Without these the binaries call themselves v0.0.0-master, which the API server's version skew
# checks and `kubectl version` then report. The values are what a release build stamps.
minor=$(echo "$K8S_VERSION" | cut -d. -f2)
build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
stamp=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    stamp="$stamp -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    stamp="$stamp -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done
stamp="$stamp -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRI_TOOLS_VERSION"
stamp="$stamp -X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION"
ldflags="-s -w $stamp"

export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly -trimpath"
tmp="$cache/tmp"
mkdir -p "$tmp"
# One `go build` for every command: packages they share compile once.
pkgs=""
for entry in $COMMANDS; do pkgs="$pkgs ${entry#*:}"; done
echo "k8s/build.sh: building Kubernetes $K8S_VERSION, etcd $ETCD_VERSION, cri-tools $CRI_TOOLS_VERSION into $bin" >&2
# shellcheck disable=SC2086
go build -ldflags "$ldflags" -o "$tmp/" $pkgs
for entry in $COMMANDS; do
    name=${entry%%:*}
    pkg=${entry#*:}
    # go build names each binary after the last element of its package path, or the one
    # before it when the last is a major version (go.etcd.io/etcd/server/v3 -> server).
    base=${pkg##*/}
    case "$base" in v[0-9]*) rest=${pkg%/*}; base=${rest##*/} ;; esac
    mv "$tmp/$base" "$bin/$name"
done
for entry in $TESTS; do
    name=${entry%%:*}
    # Test binaries: vet is off because Go >= 1.24's vet fails on Kubernetes' printf wrappers.
    go test -c -vet=off -ldflags "$ldflags" -o "$bin/$name.new" "${entry#*:}"
    mv "$bin/$name.new" "$bin/$name"
done
k8s_dir=$(go list -m -f '{{.Dir}}' k8s.io/kubernetes)
for f in $SOURCE_FILES; do
    mkdir -p "$src/${f%/*}"
    cp "$k8s_dir/$f" "$src/$f"
    chmod 644 "$src/$f" # the module cache's files are read-only
done
rm -rf "$tmp"
# Builds for other pins (an older checkout's) are ~800 MB each; keep only this one.
for other in "${cache%/*}"/*; do
    [ "$other" = "$cache" ] || rm -rf "$other"
done
echo "k8s/build.sh: built in $(( $(date +%s) - started )) s" >&2
echo "$bin"
