// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/plugin/internal/trusteddir"
	"github.com/nri-sysctl/nri-sysctl/test/fixture"
	"github.com/sirupsen/logrus"
)

// newLivenessTestPlugin serves metrics for a plugin that has never
// registered with NRI and has no containerd to look pods up in.
func newLivenessTestPlugin(t *testing.T, stuck time.Duration) (*plugin, string) {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	p := newPlugin(log, nil, "")
	p.live.stuckAfter = stuck
	p.metricsListener.flag = "127.0.0.1:0"
	t.Cleanup(p.metricsListener.close)
	if err := p.applyConfig(fixture.MustParse(t, testConfig)); err != nil {
		t.Fatal(err)
	}
	return p, "http://" + p.metricsListener.bound
}

// /livez is 200 while NRI and containerd are away, which makes /healthz 503:
// a liveness probe must not kill the plugin while containerd restarts.
func TestLivezIgnoresNRIAndContainerd(t *testing.T) {
	_, url := newLivenessTestPlugin(t, time.Minute)
	if code, body := get(t, url+"/healthz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/healthz %d %q, want 503 (not registered, no containerd)", code, body)
	}
	for range 3 {
		if code, body := get(t, url+"/livez"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
			t.Fatalf("/livez %d %q, want 200 ok", code, body)
		}
	}
}

// A lock the NRI handlers take, held past stuckAfter, makes /livez 503 with
// the reason; once it is free /livez is 200 again.
func TestLivezSeesWedgedLocks(t *testing.T) {
	for _, tc := range []struct {
		name string
		lock func(*plugin) sync.Locker
	}{
		{"config lock", func(p *plugin) sync.Locker { return &p.applying }},
		{"pod records lock", func(p *plugin) sync.Locker { return &p.records.mu }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, url := newLivenessTestPlugin(t, 50*time.Millisecond)
			lock := tc.lock(p)
			lock.Lock()
			locked := true
			t.Cleanup(func() {
				if locked {
					lock.Unlock()
				}
			})
			if code, _ := get(t, url+"/livez"); code != http.StatusOK {
				t.Fatalf("/livez %d before the lock was held stuckAfter", code)
			}
			time.Sleep(100 * time.Millisecond)
			code, body := get(t, url+"/livez")
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "locks have been held") {
				t.Fatalf("/livez %d %q with a wedged %s, want 503 naming the locks", code, body, tc.name)
			}
			lock.Unlock()
			locked = false
			waitFor(t, "/livez 200 once the lock is free", func() bool {
				code, _ := get(t, url+"/livez")
				return code == http.StatusOK
			})
		})
	}
}

// A config reload (SIGHUP) that does not return makes /livez 503 once it
// has run stuckAfter, with the reload as the reason.
func TestLivezSeesStuckReload(t *testing.T) {
	p, url := newLivenessTestPlugin(t, 50*time.Millisecond)
	p.allowInsecureConfig = true
	path := trusteddir.WriteConfig(t, testConfig)
	release := make(chan struct{})
	beforeConfigStore = func() { <-release }
	t.Cleanup(func() { beforeConfigStore = nil })
	hup := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.watchReloads(ctx, path, hup) }()
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(func() { unblock(); cancel(); <-done })
	hup <- syscall.SIGHUP
	waitFor(t, "/livez 503 with a reload stuck", func() bool {
		code, body := get(t, url+"/livez")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "config reload has been running")
	})
	unblock()
	waitFor(t, "/livez 200 once the reload returned", func() bool {
		code, _ := get(t, url+"/livez")
		return code == http.StatusOK
	})
}
