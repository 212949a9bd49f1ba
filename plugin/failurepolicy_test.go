// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/nri-sysctl/nri-sysctl/test/fixture"
)

// stallableConn is the plugin's end of its NRI connection. While stalled,
// nothing the plugin writes reaches the runtime, as when the plugin's
// process is stopped (SIGSTOP): the runtime waits for its answers in vain.
type stallableConn struct {
	net.Conn
	mu      sync.Mutex
	cond    *sync.Cond
	stalled bool
}

func (c *stallableConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	for c.stalled {
		c.cond.Wait()
	}
	c.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *stallableConn) stall(on bool) {
	c.mu.Lock()
	c.stalled = on
	c.mu.Unlock()
	c.cond.Broadcast()
}

// TestFailurePolicy: against NRI's own runtime side (v0.12.5, which
// honours a plugin's failure policy), a plugin that misses the request
// deadline. With onMissedDeadline: refuse, the container is refused, not
// created without the plugin, and the plugin is still registered once it
// answers again; with proceed (the default), NRI's own behaviour: the
// container is created without the plugin, which the runtime drops.
func TestFailurePolicy(t *testing.T) {
	for _, tt := range []struct {
		name, setting string
		refused       bool
	}{
		{"default", "", false},
		{"proceed", "onMissedDeadline: proceed\n", false},
		{"refuse", "onMissedDeadline: refuse\n", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			adaptation.SetPluginRequestTimeout(500 * time.Millisecond)
			t.Cleanup(func() { adaptation.SetPluginRequestTimeout(adaptation.DefaultPluginRequestTimeout) })
			rt := startNRIRuntime(t, "2.4.2", true)
			h := newNRIPlugin(t, "", nriDefaults+tt.setting, nriFetcher{}, nil)
			var conn *stallableConn
			h.serve(t, rt, stub.WithDialer(func(path string) (net.Conn, error) {
				c, err := net.Dial("unix", path)
				if err != nil {
					return nil, err
				}
				conn = &stallableConn{Conn: c}
				conn.cond = sync.NewCond(&conn.mu)
				return conn, nil
			}))
			h.waitReady(t, rt)
			if got := oursOf(rt.startPod(t, nriPod("before", "default", "network", "ipc", "uts"), nriContainer("before"))); got.sysctls == nil {
				t.Fatalf("before the stall: the container got none of the plugin's sysctls: %+v", got)
			}

			late := nriPod("late", "default", "network", "ipc", "uts")
			if err := rt.runPod(late); err != nil {
				t.Fatal(err)
			}
			conn.stall(true)
			adj, err := rt.createContainer(late, nriContainer("late"), api.ContainerState_CONTAINER_RUNNING)
			conn.stall(false)
			switch {
			case tt.refused && err == nil:
				t.Fatalf("a container the plugin did not answer in time was created (%+v), want it refused", oursOf(adj))
			case !tt.refused && err != nil:
				t.Fatalf("a container the plugin did not answer in time was refused (%v), want it created without the plugin", err)
			case !tt.refused && oursOf(adj).sysctls != nil:
				t.Fatalf("the container the plugin missed got its sysctls: %+v", oursOf(adj))
			}

			// The plugin answers again: the runtime still asks it only
			// if it kept it.
			after := nriPod("after", "default", "network", "ipc", "uts")
			if err := rt.runPod(after); err != nil && tt.refused {
				t.Fatalf("RunPodSandbox after the stall: %v", err)
			}
			adj, err = rt.createContainer(after, nriContainer("after"), api.ContainerState_CONTAINER_RUNNING)
			if err != nil {
				t.Fatalf("CreateContainer after the stall: %v", err)
			}
			if kept := oursOf(adj).sysctls != nil; kept != tt.refused {
				t.Errorf("after the stall the runtime asks the plugin: %v, want %v (keep_connected declared: %v)", kept, tt.refused, tt.refused)
			}
			if !tt.refused {
				select {
				case <-h.done:
				case <-time.After(nriWait):
					t.Error("the runtime dropped the plugin but its connection did not end")
				}
			}
		})
	}
}

// A pre-installed plugin's config comes in Configure itself: the policy
// sent in Configure's reply is that config's. A reload changes nothing
// the runtime was told, and says so; the next registration declares it.
func TestFailurePolicyFromTheRuntimesConfig(t *testing.T) {
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	var logged bytes.Buffer
	p.log.SetOutput(&logged)
	policy := &api.FailurePolicy{}
	p.setStub(fakeRuntime{nri: "v0.12.5", timeout: 2 * time.Second}, policy)
	if _, err := p.Configure(context.Background(), testConfig+"onMissedDeadline: refuse\n", "containerd", "2.4.2"); err != nil {
		t.Fatal(err)
	}
	if !policy.GetFailRequest() || !policy.GetKeepConnected() {
		t.Fatalf("policy from the runtime's config with onMissedDeadline: refuse = %v, want fail_request and keep_connected", policy)
	}
	if !strings.Contains(logged.String(), "declared the failure policy fail_request and keep_connected: a request") {
		t.Errorf("log does not say the policy was declared to a runtime that honours it:\n%s", logged.String())
	}

	if err := p.applyConfig(fixture.MustParse(t, testConfig+"onMissedDeadline: proceed\n")); err != nil {
		t.Fatal(err)
	}
	if !policy.GetFailRequest() {
		t.Error("a reload changed the policy already sent")
	}
	if !strings.Contains(logged.String(), "onMissedDeadline changes when the plugin next registers") {
		t.Errorf("a reload of onMissedDeadline does not say when it takes effect:\n%s", logged.String())
	}

	next := &api.FailurePolicy{}
	p.setStub(fakeRuntime{nri: "v0.12.3", timeout: 2 * time.Second}, next)
	if _, err := p.Configure(context.Background(), "", "containerd", "2.4.2"); err != nil {
		t.Fatal(err)
	}
	if next.GetFailRequest() || next.GetKeepConnected() {
		t.Errorf("the next registration under onMissedDeadline: proceed declared %v", next)
	}
	if err := p.applyConfig(fixture.MustParse(t, testConfig+"onMissedDeadline: refuse\n")); err != nil {
		t.Fatal(err)
	}
	p.setStub(fakeRuntime{nri: "v0.12.3", timeout: 2 * time.Second}, &api.FailurePolicy{})
	if _, err := p.Configure(context.Background(), "", "containerd", "2.4.2"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logged.String(), "which this runtime's NRI ignores") {
		t.Errorf("declared to NRI v0.12.3, the log does not say it is ignored:\n%s", logged.String())
	}
}
