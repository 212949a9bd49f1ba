// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package connlimit caps the connections an HTTP server holds, shedding
// idle ones first, so that clients which open connections and keep them
// (a pod anywhere in the cluster can reach a DaemonSet's metrics port)
// cannot grow the server without bound nor keep a health probe out.
package connlimit

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// Listener accepts at most Max connections at once. At the cap, a new
// connection sheds the oldest one that holds no request in progress (new,
// or idle between keep-alive requests); when every one holds a request,
// the new one is closed at once. Set the server's ConnState to Track.
type Listener struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns map[net.Conn]*conn
}

type conn struct {
	state http.ConnState
	since time.Time
}

// New wraps l to hold at most limit connections.
func New(l net.Listener, limit int) *Listener {
	return &Listener{Listener: l, max: limit, conns: map[net.Conn]*conn{}}
}

// Accept returns the next connection it admits.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.admit(c) {
			return c, nil
		}
		c.Close()
	}
}

// admit makes room for c, shedding the oldest connection without a request
// in progress, and tells whether c may be served.
func (l *Listener) admit(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.conns) >= l.max {
		var oldest net.Conn
		var at time.Time
		for k, v := range l.conns {
			if v.state == http.StateActive {
				continue
			}
			if oldest == nil || v.since.Before(at) {
				oldest, at = k, v.since
			}
		}
		if oldest == nil {
			return false
		}
		// Closed now, forgotten now: its StateClosed comes later.
		oldest.Close()
		delete(l.conns, oldest)
	}
	l.conns[c] = &conn{state: http.StateNew, since: time.Now()}
	return true
}

// Track is the server's ConnState: it keeps each connection's state.
func (l *Listener) Track(c net.Conn, s http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s {
	case http.StateClosed, http.StateHijacked:
		delete(l.conns, c)
	default:
		if v, ok := l.conns[c]; ok {
			v.state, v.since = s, time.Now()
		}
	}
}
