// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/backoff"
	"github.com/nri-sysctl/nri-sysctl/pkg/kubeapi"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl/podsysctltest"
	"github.com/nri-sysctl/nri-sysctl/test/fixture"
	"github.com/sirupsen/logrus"
)

// A plugin registered and synchronized whose containerd does not answer is
// not ready: /healthz says 503 naming containerd, and the node keeps its
// taint. Once containerd answers, both follow.
func TestReadinessWaitsForContainerd(t *testing.T) {
	sock := filepath.Join(podsysctltest.ShortSocketDir(t), "containerd.sock")
	log := logrus.New()
	log.SetOutput(io.Discard)
	p := newPlugin(log, nil, "")
	p.metricsListener.flag = "127.0.0.1:0"
	t.Cleanup(p.metricsListener.close)
	pool := podsysctl.NewPool(log, 0)
	t.Cleanup(pool.Close)
	p.connect = connectWith(pool, ContainerdFlags{Address: sock, AddressSet: true, Namespace: "k8s.io"})
	if err := p.applyConfig(fixture.MustParse(t, testConfig)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Configure(context.Background(), "", "containerd", "2.4.2"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Synchronize(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}

	f := &nodeTaint{}
	f.tainted.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var logs syncBuffer
	tlog := logrus.New()
	tlog.SetOutput(&logs)
	go func() {
		defer close(done)
		kubeapi.RunTaintRemoval(ctx, logrus.NewEntry(tlog), f, "node-1", p.synchronized, kubeapi.Readiness{Check: p.lookupReady, Interval: 20 * time.Millisecond}, backoff.New(10*time.Millisecond, 20*time.Millisecond))
	}()
	t.Cleanup(func() { cancel(); <-done })

	url := "http://" + p.metricsListener.bound + "/healthz"
	code, body := get(t, url)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "containerd") || !strings.Contains(body, sock) {
		t.Fatalf("/healthz with containerd away: %d %q, want 503 naming containerd at %s", code, body, sock)
	}
	time.Sleep(200 * time.Millisecond)
	if calls, tainted := f.calls.Load(), f.tainted.Load(); calls != 0 || !tainted {
		t.Fatalf("the API server was asked %d times (tainted %v) while containerd does not answer", calls, tainted)
	}
	if !strings.Contains(logs.String(), "keeps its not-ready taint") {
		t.Errorf("the wait is not logged: %s", logs.String())
	}

	podsysctltest.ServeVersion(t, sock)
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body = get(t, url)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz once containerd answers: %d %q", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the taint was not removed once containerd answers")
	}
	if f.tainted.Load() {
		t.Fatal("the taint is left")
	}
}

// nodeTaint is the node's not-ready taint as the API server keeps it.
type nodeTaint struct {
	calls   atomic.Int32
	tainted atomic.Bool
}

func (n *nodeTaint) RemoveNodeTaint(_ context.Context, _, key, effect string) (bool, error) {
	n.calls.Add(1)
	return key+":"+effect == kubeapi.NotReadyTaint && n.tainted.Swap(false), nil
}

// Before a config names a containerd, the plugin is not ready: no pod
// could be looked up.
func TestNotReadyWithoutALookup(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	p := newPlugin(log, nil, "")
	if ok, why := p.lookupReady(context.Background()); ok || !strings.Contains(why, "no connection configured") {
		t.Fatalf("ready %v (%q) with no lookup, want not ready", ok, why)
	}
}
