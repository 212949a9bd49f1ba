// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package podsysctltest serves a stand-in for containerd's API to tests of
// the pod lookups and of what waits for them.
package podsysctltest

import (
	"context"
	"net"
	"os"
	"testing"

	versionapi "github.com/containerd/containerd/api/services/version/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

// fakeContainerdVersion answers containerd's Version call, all a readiness
// check asks.
type fakeContainerdVersion struct {
	versionapi.UnimplementedVersionServer
}

func (fakeContainerdVersion) Version(context.Context, *emptypb.Empty) (*versionapi.VersionResponse, error) {
	return &versionapi.VersionResponse{Version: "v2.4.2"}, nil
}

// ShortSocketDir is a temporary directory short enough for a unix socket
// path (t.TempDir's can pass the 108-byte limit), removed when the test
// ends.
func ShortSocketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nrisc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// ServeVersion serves containerd's Version API on path until the test
// ends.
func ServeVersion(t testing.TB, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	versionapi.RegisterVersionServer(srv, fakeContainerdVersion{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() { srv.Stop(); <-done })
}
