// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
)

// Leaving NRI without losing an answer. When a plugin's connection closes
// while the runtime waits for its answer, NRI (pkg/adaptation, v0.8 to
// v0.12) drops the plugin and goes on as if it had answered nothing. And a
// plugin whose connection closed between requests stays in the runtime's
// list until the end of the next request, whatever its kind: if that is a
// CreateContainer, the closed plugin is asked, answers nothing, and still
// counts as present for a required plugin (fail-closed). Either way the
// container is created without the plugin's sysctls.
//
// So on SIGTERM the plugin refuses new containers, lets the requests under
// way answer, and then has the runtime drop its connection at once: it
// registers a second, throwaway connection (a sweeper, which asks for no
// container event), and closes the first inside the sweeper's
// Synchronize. The runtime blocks container creation for the whole of a
// plugin's registration (BlockPluginSync, on every containerd line) and
// ends it by removing closed plugins (sortPlugins), so no CreateContainer
// can meet the closed connection: the next one finds no plugin, and a
// fail-closed runtime refuses it.
//
// Where the sweeper cannot register, the plugin closes inside the next
// RunPodSandbox or RemovePodSandbox (whose lost answer costs nothing: NRI
// takes the close as that request's answer and drops the plugin at its
// end), and only where no pod starts or goes for leaveWait does it close
// between requests, and say so.

// errLeaving fails a CreateContainer that arrives while the plugin is
// leaving. The runtime fails that container (the kubelet retries it) and
// never creates it without the defaults. It is not one of the errors NRI
// takes as a dead plugin (a closed connection, a deadline), which would
// mean "no answer".
var errLeaving = errors.New("nri-sysctl is stopping: container creation refused so that it is retried, not created without the node's sysctl defaults")

// leaveWait is how long a stopping plugin whose sweeper could not register
// waits for a pod to start or go, to close its connection inside that
// request. Within the chart's termination grace period (10 s) with the
// request timeout twice over.
const leaveWait = 4 * time.Second

// closeNoticed is how long the sweeper's Synchronize waits, once the
// plugin's connection is closed, for the runtime to notice the close
// before it removes closed plugins.
const closeNoticed = 250 * time.Millisecond

// sweeper is the throwaway plugin a stopping plugin registers so that the
// runtime drops its closed connection before any container is created
// (see above). It asks for RemovePodSandbox alone, answered with nothing,
// so that the runtime never waits on it for a container.
type sweeper struct {
	// closeMain closes the plugin's own connection.
	closeMain func()
	closed    chan struct{}
}

func (s *sweeper) Configure(context.Context, string, string, string) (api.EventMask, error) {
	return api.MustParseEventMask("RemovePodSandbox"), nil
}

// Synchronize runs while the runtime creates no container: the plugin's
// connection is closed here, and the runtime removes it on return.
func (s *sweeper) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	s.closeMain()
	time.Sleep(closeNoticed)
	close(s.closed)
	return nil, nil
}

func (s *sweeper) RemovePodSandbox(context.Context, *api.PodSandbox) error { return nil }

// sweep registers a sweeper named after the plugin on the NRI socket at
// socketPath, which closes the plugin's connection (closeMain) inside its
// Synchronize, then leaves. It fails, with closeMain not called, when the
// sweeper cannot connect; closeMain may have run when it fails later.
func sweep(socketPath, name, idx string, closeMain func(), timeout time.Duration) error {
	// Dialled here: a pre-installed plugin's stub would take the
	// connection containerd handed it in the environment.
	dialCtx, cancelDial := context.WithTimeout(context.Background(), timeout)
	conn, err := podsysctl.TrustedDial(dialCtx, "NRI", socketPath, 0)
	cancelDial()
	if err != nil {
		return err
	}
	sw := &sweeper{closeMain: closeMain, closed: make(chan struct{})}
	s, err := stub.New(sw, stub.WithPluginName(name+"-leaving"), stub.WithPluginIdx(idx), stub.WithConnection(conn))
	if err != nil {
		conn.Close()
		return err
	}
	defer s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// Start returns once the sweeper is configured; the runtime then
	// synchronizes it.
	if err := s.Start(ctx); err != nil {
		return err
	}
	select {
	case <-sw.closed:
		// The sweeper stays until the runtime has its answer and has
		// dropped the closed plugin: a sweeper gone before that fails its
		// registration, which then drops nothing.
		time.Sleep(closeNoticed)
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the runtime did not synchronize the sweeper within %s", timeout)
	}
}

// answerLinger is how long no request may have come before a plugin that
// closes between requests does: long enough for the last answer, or
// refusal, to be written, and for a request the runtime sends meanwhile to
// be refused rather than cut by the close. Requests that keep coming hold
// the connection open for at most the runtime's request timeout.
const answerLinger = 200 * time.Millisecond

// requestGate counts the requests under way, and refuses new ones once
// the plugin is leaving. The zero value is open.
type requestGate struct {
	mu      sync.Mutex
	leaving bool
	running int
	// last is when a request last came, admitted or refused.
	last time.Time
	// lastDone is when an admitted request last returned: convergence
	// waits for a quiet moment (converge.go).
	lastDone time.Time
	// idle is closed when the gate is leaving and nothing runs.
	idle chan struct{}
	// closeOffers carries, from a request whose lost answer costs
	// nothing, the channel it waits on until the connection is closed;
	// made by leave.
	closeOffers chan chan struct{}
	// sleep is waitQuiet's sleep: time.Sleep when nil (tests count it).
	sleep func(time.Duration)
}

// enter admits a request; false once the plugin is leaving. An admitted
// request must call done.
func (g *requestGate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.leaving {
		g.last = time.Now()
		return false
	}
	g.running++
	return true
}

// quiet waits until no request has come for d, and at most until limit
// has passed: what the plugin waits before it closes its connection.
func (g *requestGate) quiet(d, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for {
		g.mu.Lock()
		wait := time.Until(g.last.Add(d))
		g.mu.Unlock()
		if wait <= 0 {
			return
		}
		if time.Until(deadline) <= 0 {
			return
		}
		time.Sleep(min(wait, time.Until(deadline)))
	}
}

func (g *requestGate) done() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.leaving {
		// Only a stopping plugin's linger reads it (quiet).
		g.last = time.Now()
	}
	g.running--
	g.lastDone = time.Now()
	if g.leaving && g.running == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// waitQuiet waits until no NRI request is under way and none returned for
// quiet, at most for limit. Each sleep is the least time until quiet can
// be reached (a request under way ends no sooner than now), so the worker
// wakes a few times a wait, not every few milliseconds: on a node
// creating pods it waits nearly all the time.
func (g *requestGate) waitQuiet(quiet, limit time.Duration) {
	sleep := g.sleep
	if sleep == nil {
		sleep = time.Sleep
	}
	deadline := time.Now().Add(limit)
	for {
		g.mu.Lock()
		wait := time.Until(g.lastDone.Add(quiet))
		if g.running > 0 {
			wait = quiet
		}
		g.mu.Unlock()
		left := time.Until(deadline)
		if wait <= 0 || left <= 0 {
			return
		}
		sleep(min(wait, left))
	}
}

// leave refuses every request from now on and waits until those under
// way have returned, or until timeout. It tells whether they all did.
func (g *requestGate) leave(timeout time.Duration) bool {
	g.mu.Lock()
	g.leaving = true
	if g.closeOffers == nil {
		g.closeOffers = make(chan chan struct{}, 1)
	}
	g.last = time.Now() // the linger counts from here at the earliest
	if g.running == 0 {
		g.mu.Unlock()
		return true
	}
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	idle := g.idle
	g.mu.Unlock()
	select {
	case <-idle:
		return true
	case <-time.After(timeout):
		return false
	}
}

// offerClose is called, once the gate is leaving, by a request whose lost
// answer costs nothing (RunPodSandbox, RemovePodSandbox). It waits, at
// most limit, until the plugin has closed its connection (takeCloseOffer):
// NRI then takes the close for this request's answer, and drops the
// plugin before its next request. The runtime sends one request at a
// time, so one offer at most is pending; any further one returns at once.
func (g *requestGate) offerClose(limit time.Duration) {
	g.mu.Lock()
	offers := g.closeOffers
	g.mu.Unlock()
	if offers == nil {
		return
	}
	closed := make(chan struct{})
	select {
	case offers <- closed:
	default:
		return
	}
	select {
	case <-closed:
	case <-time.After(limit):
	}
}

// takeCloseOffer waits, at most wait, for a request that offers to hold
// the close (offerClose). The caller closes the connection, then closes
// the channel returned, which lets that request return.
func (g *requestGate) takeCloseOffer(wait time.Duration) (chan struct{}, bool) {
	g.mu.Lock()
	offers := g.closeOffers
	g.mu.Unlock()
	select {
	case closed := <-offers:
		return closed, true
	case <-time.After(wait):
		return nil, false
	}
}
