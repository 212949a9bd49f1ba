package main

import (
	"errors"
	"sync"
	"time"
)

// Leaving NRI without losing an answer. When a plugin's connection closes
// while the runtime waits for its answer, NRI (pkg/adaptation, v0.8 to
// v0.12) drops the plugin and goes on as if it had answered nothing: the
// container is created without the plugin's sysctls, and a required
// plugin (fail-closed) still counts as having been asked. So on SIGTERM
// the plugin first refuses new requests, lets those under way answer,
// lingers until their answers are written, and only then closes.

// errLeaving fails a CreateContainer that arrives while the plugin is
// leaving. The runtime fails that container (the kubelet retries it) and
// never creates it without the defaults. It is not one of the errors NRI
// takes as a dead plugin (a closed connection, a deadline), which would
// mean "no answer".
var errLeaving = errors.New("nri-sysctl is stopping: container creation refused so that it is retried, not created without the node's sysctl defaults")

// answerLinger is how long no request may have come before the plugin
// closes its connection: long enough for the last answer, or refusal, to
// be written, and for a request the runtime sends meanwhile to be refused
// rather than cut by the close (which NRI takes as no answer: a bare
// container). Requests that keep coming hold the connection open for at
// most the runtime's request timeout.
const answerLinger = 200 * time.Millisecond

// requestGate counts the requests under way, and refuses new ones once
// the plugin is leaving. The zero value is open.
type requestGate struct {
	mu      sync.Mutex
	leaving bool
	running int
	// last is when a request last came, admitted or refused.
	last time.Time
	// idle is closed when the gate is leaving and nothing runs.
	idle chan struct{}
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
	if g.leaving && g.running == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// leave refuses every request from now on and waits until those under
// way have returned, or until timeout. It tells whether they all did.
func (g *requestGate) leave(timeout time.Duration) bool {
	g.mu.Lock()
	g.leaving = true
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
