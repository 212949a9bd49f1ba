// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podsysctl

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl/podsysctltest"
	"github.com/sirupsen/logrus"
)

// A pre-installed plugin's discovered lookup is ready once one of the
// parent's sockets answers, before any pod was looked up; while none
// does, the reason names each one.
func TestDiscoveredLookupAnswers(t *testing.T) {
	dir := podsysctltest.ShortSocketDir(t)
	ttrpc, grpcSock := filepath.Join(dir, "a.sock.ttrpc"), filepath.Join(dir, "b.sock")
	log := logrus.New()
	log.SetOutput(io.Discard)
	l := NewPool(log, 0)
	t.Cleanup(l.Close)
	d := &discoveredLookup{pool: l, namespace: "k8s.io", candidates: []Target{{Address: ttrpc, Namespace: "k8s.io"}, {Address: grpcSock, Namespace: "k8s.io"}}}
	ok, why := d.Answers(context.Background())
	if ok || !strings.Contains(why, ttrpc) || !strings.Contains(why, grpcSock) {
		t.Fatalf("no socket served: answers %v %q, want false naming both", ok, why)
	}
	podsysctltest.ServeVersion(t, grpcSock)
	waitForLong(t, "the served candidate to answer", func() bool {
		ok, _ := d.Answers(context.Background())
		return ok
	})
}

// waitForLong is waitFor with room for gRPC's reconnect backoff.
func waitForLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
