package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/sirupsen/logrus"
)

// containerdTarget is where pods are looked up.
type containerdTarget struct {
	address, namespace string
}

// resolveContainerd picks the containerd socket and namespace: a flag given
// on the command line, then the config's containerdAddress /
// containerdNamespace, then the flag's default. explicit is false when the
// address is only the default.
func resolveContainerd(f ContainerdFlags, cfg *config.Config) (t containerdTarget, explicit bool) {
	t = containerdTarget{address: f.Address, namespace: f.Namespace}
	explicit = f.AddressSet
	if !f.AddressSet && cfg.ContainerdAddress != "" {
		t.address, explicit = cfg.ContainerdAddress, true
	}
	if !f.NamespaceSet && cfg.ContainerdNamespace != "" {
		t.namespace = cfg.ContainerdNamespace
	}
	return t, explicit
}

// lookups keeps one containerd connection per target, so that a reload
// naming the same containerd reuses it.
type lookups struct {
	log   *logrus.Logger
	flags ContainerdFlags
	// parentPID is containerd's pid when containerd launched the plugin
	// (pre-installed), else 0.
	parentPID int

	mu    sync.Mutex
	conns map[containerdTarget]*containerdConn
}

func newLookups(log *logrus.Logger, flags ContainerdFlags, parentPID int) *lookups {
	return &lookups{log: log, flags: flags, parentPID: parentPID, conns: map[containerdTarget]*containerdConn{}}
}

// connect returns the lookup for a config. A pre-installed plugin with no
// address given finds the containerd that launched it, whatever its socket.
func (l *lookups) connect(cfg *config.Config) (podsysctl.Fetcher, error) {
	t, explicit := resolveContainerd(l.flags, cfg)
	if l.parentPID == 0 || explicit {
		return l.conn(t, true)
	}
	candidates := podsysctl.ListeningSockets(l.parentPID)
	l.log.WithFields(logrus.Fields{"containerd_pid": l.parentPID, "candidates": strings.Join(candidates, ",")}).Info("looking for the containerd that launched the plugin among its listening sockets")
	d := &discoveredLookup{lookups: l, namespace: t.namespace}
	for _, addr := range candidates {
		d.candidates = append(d.candidates, containerdTarget{address: addr, namespace: t.namespace})
	}
	if !slices.Contains(candidates, t.address) {
		d.candidates = append(d.candidates, t)
	}
	return d, nil
}

// conn returns the connection for t, making it on first use.
func (l *lookups) conn(t containerdTarget, check bool) (*containerdConn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.conns[t]; ok {
		return c, nil
	}
	cd, err := podsysctl.NewContainerd(t.address, t.namespace, l.parentPID)
	if err != nil {
		return nil, err
	}
	c := &containerdConn{Containerd: cd, target: t, log: l.log}
	l.conns[t] = c
	if check {
		l.log.WithFields(logrus.Fields{"address": t.address, "containerd_namespace": t.namespace}).Info("looking up pods' own sysctls in containerd")
		go l.checkReachable(c, t)
	}
	return c, nil
}

// checkReachable says at once when the lookup socket does not answer:
// every pod would get nothing.
func (l *lookups) checkReachable(c *containerdConn, t containerdTarget) {
	log := l.log.WithField("address", t.address)
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

// answerer is a lookup that can tell whether containerd answers on it:
// /healthz and the taint removal wait for that, since until then every pod
// would get nothing.
type answerer interface {
	answers(ctx context.Context) (ok bool, why string)
}

// lookupAnswers tells whether f's containerd answers; a lookup that
// cannot tell (a test's fake) counts as answering.
func lookupAnswers(ctx context.Context, f podsysctl.Fetcher) (bool, string) {
	if a, ok := f.(answerer); ok {
		return a.answers(ctx)
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
	*podsysctl.Containerd
	target containerdTarget
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

func (c *containerdConn) answers(ctx context.Context) (bool, string) {
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
			c.log.WithFields(logrus.Fields{"address": c.target.address, "version": v}).Info("containerd answers on the pod lookup connection")
			return true, ""
		}
	}
	return false, fmt.Sprintf("containerd does not answer at %s: %v", c.target.address, c.lastErr)
}

func (l *lookups) Close() {
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
	*lookups
	namespace  string
	candidates []containerdTarget

	mu     sync.Mutex
	chosen *containerdConn
}

// answers: the chosen socket's containerd answered a lookup, or one of
// the candidates answers now. Every candidate is served by the parent
// containerd, so any that answers its API will know the pods.
func (d *discoveredLookup) answers(ctx context.Context) (bool, string) {
	d.mu.Lock()
	chosen := d.chosen
	d.mu.Unlock()
	if chosen != nil {
		return true, ""
	}
	whys := make([]string, 0, len(d.candidates))
	for _, t := range d.candidates {
		c, err := d.conn(t, false)
		if err != nil {
			whys = append(whys, fmt.Sprintf("%s: %v", t.address, err))
			continue
		}
		ok, why := c.answers(ctx)
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

func (d *discoveredLookup) Fetch(ctx context.Context, podID string) (podsysctl.PodSysctls, error) {
	d.mu.Lock()
	chosen := d.chosen
	d.mu.Unlock()
	if chosen != nil {
		return chosen.Fetch(ctx, podID)
	}
	var errs []error
	for _, t := range d.candidates {
		c, err := d.conn(t, false)
		if err == nil {
			var own podsysctl.PodSysctls
			if own, err = c.Fetch(ctx, podID); err == nil {
				d.mu.Lock()
				d.chosen = c
				d.mu.Unlock()
				d.log.WithFields(logrus.Fields{"address": t.address, "containerd_namespace": t.namespace}).Info("found the containerd that launched the plugin; looking pods up there")
				return own, nil
			}
		}
		errs = append(errs, fmt.Errorf("%s: %w", t.address, err))
		if ctx.Err() != nil {
			break
		}
	}
	return podsysctl.PodSysctls{}, fmt.Errorf("no containerd socket of the parent process knows pod %s: %w", podID, errors.Join(errs...))
}
