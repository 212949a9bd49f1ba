// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podsysctl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

// Target is where pods are looked up: a containerd socket and the
// containerd namespace its pods live in.
type Target struct {
	Address, Namespace string
}

// Pool keeps one containerd connection per target, so that a reload
// naming the same containerd reuses it.
//
// Locks: Pool.mu guards conns, and is never held together with a
// connection's own mu (one readiness check at a time);
// discoveredLookup.mu is a leaf.
type Pool struct {
	log *logrus.Logger
	// parentPID is containerd's pid when containerd launched the plugin
	// (pre-installed), else 0.
	parentPID int

	mu    sync.Mutex
	conns map[Target]*containerdConn
}

// NewPool returns an empty pool. parentPID is containerd's pid when
// containerd launched the plugin, else 0.
func NewPool(log *logrus.Logger, parentPID int) *Pool {
	return &Pool{log: log, parentPID: parentPID, conns: map[Target]*containerdConn{}}
}

// Lookup returns the lookup at t. explicit says t's address was given
// (not only a default): a pre-installed plugin with no address given finds
// the containerd that launched it, whatever its socket.
func (l *Pool) Lookup(t Target, explicit bool) (Fetcher, error) {
	if l.parentPID == 0 || explicit {
		return l.conn(t, true)
	}
	candidates := ListeningSockets(l.parentPID)
	l.log.WithFields(logrus.Fields{"containerd_pid": l.parentPID, "candidates": strings.Join(candidates, ",")}).Info("looking for the containerd that launched the plugin among its listening sockets")
	d := &discoveredLookup{pool: l, namespace: t.Namespace}
	for _, addr := range candidates {
		d.candidates = append(d.candidates, Target{Address: addr, Namespace: t.Namespace})
	}
	if !slices.Contains(candidates, t.Address) {
		d.candidates = append(d.candidates, t)
	}
	return d, nil
}

// conn returns the connection for t, making it on first use.
func (l *Pool) conn(t Target, check bool) (*containerdConn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.conns[t]; ok {
		return c, nil
	}
	cd, err := NewContainerd(t.Address, t.Namespace, l.parentPID)
	if err != nil {
		return nil, err
	}
	c := &containerdConn{Containerd: cd, target: t, log: l.log}
	l.conns[t] = c
	if check {
		l.log.WithFields(logrus.Fields{"address": t.Address, "containerd_namespace": t.Namespace}).Info("looking up pods' own sysctls in containerd")
		go l.checkReachable(c)
	}
	return c, nil
}

// checkReachable says at once when the lookup socket does not answer:
// every pod would get nothing.
func (l *Pool) checkReachable(c *containerdConn) {
	log := l.log.WithField("address", c.target.Address)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastTry = time.Now()
	v, err := c.Check(context.Background())
	c.lastErr = err
	if err != nil {
		log.WithError(err).Error("cannot reach containerd: pods get no defaults until it answers; check --containerd-address or containerdAddress")
		return
	}
	c.answered.Store(true)
	log.WithField("version", v).Info("containerd answers")
}

// Answerer is a lookup that can tell whether containerd answers on it:
// /healthz and the taint removal wait for that, since until then every pod
// would get nothing.
type Answerer interface {
	Answers(ctx context.Context) (ok bool, why string)
}

// Answers tells whether f's containerd answers; a lookup that cannot
// tell (a test's fake) counts as answering.
func Answers(ctx context.Context, f Fetcher) (bool, string) {
	if a, ok := f.(Answerer); ok {
		return a.Answers(ctx)
	}
	return true, ""
}

// answersTimeout bounds one check made for /healthz or the taint removal.
const answersTimeout = time.Second

// recheckAfter spaces the checks of a containerd that has not answered
// yet, however often /healthz is asked.
const recheckAfter = time.Second

// containerdConn is one containerd connection, and whether containerd's
// API has answered on it.
type containerdConn struct {
	*Containerd
	target Target
	log    *logrus.Logger

	// answered latches: once containerd answered on this connection the
	// lookup counts as working for good. A containerd that stops answering
	// later is restarting (NRI disconnects then, so /healthz is 503 for
	// that reason) or broken in a way a failing lookup already counts
	// and logs.
	answered atomic.Bool
	mu       sync.Mutex // one check at a time; guards lastTry and lastErr
	lastTry  time.Time
	lastErr  error
}

func (c *containerdConn) Answers(ctx context.Context) (bool, string) {
	if c.answered.Load() {
		return true, ""
	}
	// Waits for a check under way (at most its timeout), rather than
	// reporting "not yet" for a containerd about to answer.
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.answered.Load() {
		return true, ""
	}
	if c.lastTry.IsZero() || time.Since(c.lastTry) >= recheckAfter {
		ctx, cancel := context.WithTimeout(ctx, answersTimeout)
		defer cancel()
		c.lastTry = time.Now()
		var v string
		v, c.lastErr = c.Check(ctx)
		if c.lastErr == nil {
			c.answered.Store(true)
			c.log.WithFields(logrus.Fields{"address": c.target.Address, "version": v}).Info("containerd answers on the pod lookup connection")
			return true, ""
		}
	}
	return false, fmt.Sprintf("containerd does not answer at %s: %v", c.target.Address, c.lastErr)
}

// Close closes every connection of the pool.
func (l *Pool) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for t, c := range l.conns {
		c.Close()
		delete(l.conns, t)
	}
}

// discoveredLookup tries the parent's sockets in turn and keeps the first
// that knows the pod asked about: that one is the containerd sending the
// events, not just any process listening on a socket.
type discoveredLookup struct {
	pool       *Pool
	namespace  string
	candidates []Target

	mu     sync.Mutex
	chosen *containerdConn
}

// Answers: the chosen socket's containerd answered a lookup, or one of
// the candidates answers now. Every candidate is served by the parent
// containerd, so any that answers its API will know the pods.
func (d *discoveredLookup) Answers(ctx context.Context) (bool, string) {
	d.mu.Lock()
	chosen := d.chosen
	d.mu.Unlock()
	if chosen != nil {
		return true, ""
	}
	whys := make([]string, 0, len(d.candidates))
	for _, t := range d.candidates {
		c, err := d.pool.conn(t, false)
		if err != nil {
			whys = append(whys, fmt.Sprintf("%s: %v", t.Address, err))
			continue
		}
		ok, why := c.Answers(ctx)
		if ok {
			return true, ""
		}
		whys = append(whys, why)
	}
	if len(whys) == 0 {
		return false, "containerd does not answer: the parent process has no socket to look pods up on"
	}
	return false, strings.Join(whys, "; ")
}

// RuntimeAdded asks the containerd chosen by an earlier Fetch.
func (d *discoveredLookup) RuntimeAdded(ctx context.Context, podID string, own map[string]string) (map[string]string, error) {
	d.mu.Lock()
	chosen := d.chosen
	d.mu.Unlock()
	if chosen == nil {
		return nil, fmt.Errorf("pod %s: no containerd socket of the parent process chosen yet", podID)
	}
	return chosen.RuntimeAdded(ctx, podID, own)
}

func (d *discoveredLookup) Fetch(ctx context.Context, podID string) (PodSysctls, error) {
	d.mu.Lock()
	chosen := d.chosen
	d.mu.Unlock()
	if chosen != nil {
		return chosen.Fetch(ctx, podID)
	}
	var errs []error
	for _, t := range d.candidates {
		c, err := d.pool.conn(t, false)
		if err == nil {
			var own PodSysctls
			if own, err = c.Fetch(ctx, podID); err == nil {
				d.mu.Lock()
				d.chosen = c
				d.mu.Unlock()
				d.pool.log.WithFields(logrus.Fields{"address": t.Address, "containerd_namespace": t.Namespace}).Info("found the containerd that launched the plugin; looking pods up there")
				return own, nil
			}
		}
		errs = append(errs, fmt.Errorf("%s: %w", t.Address, err))
		if ctx.Err() != nil {
			break
		}
	}
	return PodSysctls{}, fmt.Errorf("no containerd socket of the parent process knows pod %s: %w", podID, errors.Join(errs...))
}
