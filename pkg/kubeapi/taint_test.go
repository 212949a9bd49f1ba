// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package kubeapi

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/backoff"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// fakeTaintRemover stands for the API server: it fails while failing is
// set, and counts the calls.
type fakeTaintRemover struct {
	mu      sync.Mutex
	calls   int
	failing bool
	tainted bool
}

func (f *fakeTaintRemover) RemoveNodeTaint(_ context.Context, node, key, effect string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.failing {
		return false, errors.New("GET /api/v1/nodes/" + node + ": 503 Service Unavailable")
	}
	removed := f.tainted && key == NotReadyTaintKey && effect == NotReadyTaintEffect
	f.tainted = f.tainted && !removed
	return removed, nil
}

func (f *fakeTaintRemover) state() (calls int, tainted bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, f.tainted
}

func TestStartTaintRemovalNeedsNodeName(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	err := StartTaintRemoval(context.Background(), logrus.New(), "nri-sysctl/test", make(chan struct{}), Readiness{})
	if err == nil || !strings.Contains(err.Error(), "NODE_NAME") || !strings.Contains(err.Error(), "spec.nodeName") {
		t.Fatalf("err = %v", err)
	}
	t.Setenv("NODE_NAME", "n")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if err := StartTaintRemoval(context.Background(), logrus.New(), "nri-sysctl/test", make(chan struct{}), Readiness{}); err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
		t.Fatalf("err = %v", err)
	}
}

// Nothing is sent before the first Synchronize; then the taint goes, and a
// failing API server is retried.
func TestRunTaintRemovalWaitsForSynchronized(t *testing.T) {
	f := &fakeTaintRemover{failing: true, tainted: true}
	synced := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	log := logrus.New()
	log.SetOutput(io.Discard)
	hook := logtest.NewLocal(log)
	go func() {
		defer close(done)
		RunTaintRemoval(ctx, logrus.NewEntry(log), f, "node-1", synced, Readiness{Check: alwaysReady, Interval: time.Millisecond}, backoff.New(10*time.Millisecond, 20*time.Millisecond))
	}()
	t.Cleanup(func() { cancel(); <-done })
	time.Sleep(100 * time.Millisecond)
	if calls, _ := f.state(); calls != 0 {
		t.Fatalf("requests before the first Synchronize")
	}
	close(synced)
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logged(hook), "503"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no failed attempt logged:\n%s", logged(hook))
		}
	}
	f.mu.Lock()
	f.failing = false
	f.mu.Unlock()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("taint removal did not finish")
	}
	if _, tainted := f.state(); tainted {
		t.Fatal("the taint is left")
	}
	if !strings.Contains(logged(hook), "removed the not-ready taint") {
		t.Fatalf("log: %s", logged(hook))
	}
}

func alwaysReady(context.Context) (bool, string) { return true, "" }
