//go:build tools

// Package tools pins containerd 2.x, the second containerd the shim's tests run under (Debian's
// 1.6 is the first): its daemon, its own runc shim and ctr, built by build.sh, never shipped.
// The blank imports keep them in go.mod and go.sum.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
