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

// answerLinger is how long the plugin keeps its connection open after the
// last request under way has returned: long enough for its answer, and
// for refusals of requests that came meanwhile, to be written.
const answerLinger = 200 * time.Millisecond

// requestGate counts the requests under way, and refuses new ones once
// the plugin is leaving. The zero value is open.
type requestGate struct {
	mu      sync.Mutex
	leaving bool
	running int
	// idle is closed when the gate is leaving and nothing runs.
	idle chan struct{}
}

// enter admits a request; false once the plugin is leaving. An admitted
// request must call done.
func (g *requestGate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.leaving {
		return false
	}
	g.running++
	return true
}

func (g *requestGate) done() {
	g.mu.Lock()
	defer g.mu.Unlock()
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
