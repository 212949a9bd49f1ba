// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package connlimit

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func serve(t *testing.T, limit int, handler http.Handler) (*Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(ln, limit)
	srv := &http.Server{Handler: handler, ConnState: l.Track, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l, ln.Addr().String()
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })

// keepAlive sends one request on a new connection, reads the answer and
// keeps the connection open, idle.
func keepAlive(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return c
}

// waitNoneActive waits until the server has marked every connection it
// answered idle: it does so just after writing the answer.
func waitNoneActive(t *testing.T, l *Listener) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		l.mu.Lock()
		active := 0
		for _, c := range l.conns {
			if c.state == http.StateActive {
				active++
			}
		}
		l.mu.Unlock()
		if active == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still active", active)
		}
		time.Sleep(time.Millisecond)
	}
}

// Clients that keep connections idle cannot hold more than the cap, nor
// keep a new request (a health probe) out.
func TestIdleConnectionsAreShed(t *testing.T) {
	l, addr := serve(t, 4, ok)
	var idle []net.Conn
	for range 12 {
		idle = append(idle, keepAlive(t, addr))
		waitNoneActive(t, l)
	}
	if n := held(l); n > 4 {
		t.Fatalf("%d connections held, want at most 4", n)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("a request with the cap full of idle connections: %v", err)
	}
	resp.Body.Close()
	// The oldest idle ones were closed by the server.
	idle[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idle[0].Read(make([]byte, 1)); err == nil {
		t.Fatal("the oldest idle connection is still open")
	}
}

// A connection that holds a request in progress is not shed: at the cap
// with every one busy, the new connection is the one closed.
func TestActiveConnectionsAreKept(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	slow := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		started <- struct{}{}
		<-release
		fmt.Fprintln(w, "done")
	})
	l, addr := serve(t, 2, slow)
	// Both handlers are released at once: which of them a single send
	// would wake is up to the scheduler, not the order they started in.
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	defer releaseAll()
	var busy []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		busy = append(busy, c)
		<-started
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a third connection was served with two requests in progress and a cap of 2")
	}
	if n := held(l); n != 2 {
		t.Fatalf("%d connections held, want the 2 busy ones", n)
	}
	releaseAll()
	busy[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(busy[0]).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("the busy connection's answer: %q, %v", line, err)
	}
}

// held is how many connections l holds now.
func held(l *Listener) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}
