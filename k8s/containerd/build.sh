#!/bin/sh
# Builds containerd 2.x (containerd, its runc shim containerd-shim-runc-v2, and ctr) from the Go
# module pinned in k8s/containerd/go.mod, for the tests of containerd-shim-peapod-v2 under
# containerd 2.x (Debian's package is 1.6). Like k8s/build.sh: into a cache keyed by the pin (and
# this script), a no-op when the cache holds them; prints the cache's bin directory last.
#
#   k8s/containerd/build.sh            build what is missing, print the bin directory
#   k8s/containerd/build.sh --print    only print the bin directory (exit 1 when not complete)
#
# A module of its own beside k8s/go.mod: containerd's dependencies would otherwise move the
# Kubernetes tools' (and rebuild them, 11 minutes), and each pin is bumped on its own.
# The cache lives under $PEAPOD_CONTAINERD_CACHE (default /var/cache/peapod/containerd).
set -eu
cd "$(dirname "$0")"

VERSION=$(awk '$1 == "require" && $2 == "github.com/containerd/containerd/v2" { print $3; exit }' go.mod)
[ -n "$VERSION" ] || { echo "k8s/containerd/build.sh: no containerd pin in go.mod" >&2; exit 1; }
key="$VERSION-$(cat go.mod go.sum build.sh | sha256sum | cut -c1-12)"
cache="${PEAPOD_CONTAINERD_CACHE:-/var/cache/peapod/containerd}/$key"
bin="$cache/bin"
COMMANDS="containerd containerd-shim-runc-v2 ctr"

complete() {
    for name in $COMMANDS; do
        [ -x "$bin/$name" ] || return 1
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

command -v go >/dev/null 2>&1 || { echo "k8s/containerd/build.sh: go not found (Go 1.26 is needed)" >&2; exit 1; }
mkdir -p "$bin"
started=$(date +%s)
# What containerd's own Makefile stamps, so that `containerd --version` and the CRI's Version
# name the release rather than "+unknown".
ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$VERSION"
ldflags="$ldflags -X github.com/containerd/containerd/v2/version.Revision=peapod-build"
# Static (no cgo), and without the snapshotters whose libraries this machine lacks, as the
# release notes' static builds are made.
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly -trimpath"
tags="no_btrfs no_devmapper no_zfs"
tmp="$cache/tmp"
mkdir -p "$tmp"
pkgs=""
for name in $COMMANDS; do pkgs="$pkgs github.com/containerd/containerd/v2/cmd/$name"; done
echo "k8s/containerd/build.sh: building containerd $VERSION into $bin" >&2
# shellcheck disable=SC2086
go build -tags "$tags" -ldflags "$ldflags" -o "$tmp/" $pkgs
for name in $COMMANDS; do mv "$tmp/$name" "$bin/$name"; done
rm -rf "$tmp"
# Keep only this pin's build.
for other in "${cache%/*}"/*; do
    [ "$other" = "$cache" ] || rm -rf "$other"
done
echo "k8s/containerd/build.sh: built in $(( $(date +%s) - started )) s" >&2
echo "$bin"
