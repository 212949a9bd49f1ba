// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/connlimit"
	"github.com/nri-sysctl/nri-sysctl/pkg/converge"
	"github.com/nri-sysctl/nri-sysctl/pkg/outcome"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
)

// metrics is what the plugin reports on /metrics, /healthz and /livez. The
// handlers call its methods through plugin.meter, which stays nil while no
// metrics address is set: every method of a nil *metrics returns at once,
// so metrics off cost one atomic load and a nil check per call site.
// Metrics on cost a few atomic adds: each label value has its counter
// picked once, here, never looked up by label on the create path.
type metrics struct {
	registry *prometheus.Registry

	containers     [outcome.Count]prometheus.Counter // by outcome
	sysctlsApplied prometheus.Counter
	sysctlsSkipped [policy.NumSkipCodes]prometheus.Counter // by skip code, sysctl codes only
	profiles       map[policy.ProfileOutcome]prometheus.Counter

	lookups        prometheus.Counter
	lookupFailures prometheus.Counter
	lookupSeconds  prometheus.Histogram

	namespaceWrites        prometheus.Counter
	namespaceWriteFailures prometheus.Counter

	// convergedPods and convergedKeys count convergence (converge.go).
	convergedPods prometheus.Counter
	convergedKeys [converge.KeyResultCount]prometheus.Counter

	reloadsSucceeded    prometheus.Counter
	reloadsFailed       prometheus.Counter
	lastReloadSucceeded prometheus.Gauge

	// registered: the NRI connection is up; synchronized: the runtime's
	// Synchronize has been answered on it. /healthz wants both.
	registered   atomic.Bool
	synchronized atomic.Bool
	lacking      lackingContainers
	// lookupReady tells whether containerd answers on the lookup in
	// force; nil counts as answering.
	lookupReady func(context.Context) (bool, string)
	// alive tells /livez whether the plugin is stuck; nil counts as alive.
	alive func() (bool, string)
}

// configInForce reports the config text's digest and the mode in force,
// read at each scrape.
type configInForce func() (sha256Hex string, mode string)

func newMetrics(info configInForce) *metrics {
	m := &metrics{registry: prometheus.NewRegistry()}
	reg := m.registry
	containers := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nri_sysctl_containers_total",
		Help: "Containers the plugin decided for, by outcome (the nri-sysctl.io/outcome annotation).",
	}, []string{"outcome"})
	for o := range outcome.Outcome(outcome.Count) {
		m.containers[o] = containers.WithLabelValues(o.String())
	}
	m.sysctlsApplied = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "nri_sysctl_sysctls_applied_total",
		Help: "Sysctls given to containers (one per key per container, as in nri-sysctl.io/injected).",
	})
	skipped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nri_sysctl_sysctls_skipped_total",
		Help: "Configured sysctls a container did not get, by reason (as in nri-sysctl.io/skipped).",
	}, []string{"reason"})
	for c := range policy.SkipCode(policy.NumSkipCodes) {
		if c.Profile() {
			continue // a profile is no sysctl: nri_sysctl_profiles_total counts it
		}
		m.sysctlsSkipped[c] = skipped.WithLabelValues(c.Label())
	}
	profiles := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nri_sysctl_profiles_total",
		Help: "Profiles pods asked for (nri-sysctl.io/profiles), once per pod and profile, by result.",
	}, []string{"result"})
	m.profiles = make(map[policy.ProfileOutcome]prometheus.Counter, len(policy.ProfileOutcomes))
	for _, r := range policy.ProfileOutcomes {
		m.profiles[r] = profiles.WithLabelValues(string(r))
	}
	m.lookups = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "nri_sysctl_pod_lookups_total",
		Help: "Lookups of a pod's own sysctls in containerd.",
	})
	m.lookupFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "nri_sysctl_pod_lookup_failures_total",
		Help: "Pod lookups that failed; the pod then gets nothing.",
	})
	m.lookupSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "nri_sysctl_pod_lookup_duration_seconds",
		Help:    "Time a pod lookup in containerd took, failures included.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	})
	m.namespaceWrites = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "nri_sysctl_namespace_writes_total",
		Help: "Namespace mode: sysctls the plugin set, or tried to set, in a pod's namespaces.",
	})
	m.namespaceWriteFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "nri_sysctl_namespace_write_failures_total",
		Help: "Namespace mode: sysctls that could not be set in a pod's namespaces.",
	})
	m.convergedPods = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "nri_sysctl_converged_pods_total",
		Help: "Running pods whose namespaces a convergence changed (runningPods: converge).",
	})
	convergedKeys := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nri_sysctl_converge_keys_total",
		Help: "Keys of running pods a convergence acted on, by result: " + convergeKeyResultsHelp() + ".",
	}, []string{"result"})
	for r := range converge.KeyResult(converge.KeyResultCount) {
		m.convergedKeys[r] = convergedKeys.WithLabelValues(r.String())
	}
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nri_sysctl_config_reloads_total",
		Help: "Config reloads (SIGHUP), by result; a failed one leaves the old config in force.",
	}, []string{"result"})
	m.reloadsSucceeded = reloads.WithLabelValues("success")
	m.reloadsFailed = reloads.WithLabelValues("failure")
	m.lastReloadSucceeded = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "nri_sysctl_config_last_reload_success_timestamp_seconds",
		Help: "Unix time of the last successful config reload (0: none since start).",
	})
	infoDesc := prometheus.NewDesc("nri_sysctl_config_info",
		"The config in force: hash is the first 12 hex digits of the SHA-256 of its text, mode the mode in force. Always 1.",
		[]string{"hash", "mode"}, nil)
	configInfo := prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		hash, mode := info()
		ch <- prometheus.MustNewConstMetric(infoDesc, prometheus.GaugeValue, 1, config.ShortHash(hash), mode)
	})
	lacking := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "nri_sysctl_containers_lacking_defaults",
		Help: "Running containers found at Synchronize without the defaults, less those whose pod was since removed or healed.",
	}, func() float64 { return float64(m.lacking.total()) })
	registered := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "nri_sysctl_registered",
		Help: "1 while the plugin is registered with the runtime's NRI, else 0.",
	}, func() float64 {
		if m.registered.Load() {
			return 1
		}
		return 0
	})
	reg.MustRegister(containers, m.sysctlsApplied, skipped, profiles, m.lookups, m.lookupFailures, m.lookupSeconds,
		m.namespaceWrites, m.namespaceWriteFailures, m.convergedPods, convergedKeys, reloads, m.lastReloadSucceeded, configInfo, lacking, registered)
	return m
}

// decided counts one container's decision: its outcome, the keys it got
// and the keys it did not get (namespace-mode write failures among them).
// A pod whose container got the defaults is healed: its namespaces, shared
// by all its containers, now hold them.
func (m *metrics) decided(podID string, o outcome.Outcome, applied []sysctl.Sysctl, skipped []policy.Skipped) {
	if m == nil {
		return
	}
	m.containerOutcome(o)
	if len(applied) > 0 {
		m.sysctlsApplied.Add(float64(len(applied)))
	}
	for _, s := range skipped {
		if int(s.Code) < len(m.sysctlsSkipped) && m.sysctlsSkipped[s.Code] != nil {
			m.sysctlsSkipped[s.Code].Inc()
		}
	}
	if o.Heals() {
		m.lacking.forget(podID)
	}
}

// profilesDecided counts one pod's profiles, each once.
func (m *metrics) profilesDecided(d policy.Decision) {
	if m == nil {
		return
	}
	if d.ProfilesRefused() != "" {
		m.profiles[policy.ProfileRefused].Inc()
	}
	for _, r := range d.Profiles() {
		if c := m.profiles[r.Result]; c != nil {
			c.Inc()
		}
	}
}

// containerOutcome counts a container that got nothing: excluded, or its
// pod could not be looked up or written into. A value that is no outcome
// is counted as none.
func (m *metrics) containerOutcome(o outcome.Outcome) {
	if m == nil || int(o) >= len(m.containers) {
		return
	}
	m.containers[o].Inc()
}

// lookedUp counts one pod lookup in containerd.
func (m *metrics) lookedUp(took time.Duration, err error) {
	m.lookups.Inc()
	if err != nil {
		m.lookupFailures.Inc()
	}
	m.lookupSeconds.Observe(took.Seconds())
}

// meterLookups makes f count its lookups.
func (m *metrics) meterLookups(f podsysctl.Fetcher) podsysctl.Fetcher {
	if m == nil {
		return f
	}
	return meteredFetcher{Fetcher: f, m: m}
}

type meteredFetcher struct {
	podsysctl.Fetcher
	m *metrics
}

// Answers passes on whether the metered lookup's containerd answers.
func (f meteredFetcher) Answers(ctx context.Context) (bool, string) {
	return podsysctl.Answers(ctx, f.Fetcher)
}

// RuntimeAdded passes on to the metered lookup; not counted, as it is
// convergence's, not a pod's lookup.
func (f meteredFetcher) RuntimeAdded(ctx context.Context, podID string, own map[string]string) (map[string]string, error) {
	return podsysctl.RuntimeAdded(ctx, f.Fetcher, podID, own)
}

func (f meteredFetcher) Fetch(ctx context.Context, podID string) (podsysctl.PodSysctls, error) {
	start := time.Now()
	own, err := f.Fetcher.Fetch(ctx, podID)
	f.m.lookedUp(time.Since(start), err)
	return own, err
}

// namespaceWritten counts a namespace-mode attempt on a pod: keys tried,
// and of those the ones that failed.
func (m *metrics) namespaceWritten(tried, failed int) {
	if m == nil || tried == 0 {
		return
	}
	m.namespaceWrites.Add(float64(tried))
	m.namespaceWriteFailures.Add(float64(failed))
}

// convergeKeyResultsHelp lists each result's label and what it says.
func convergeKeyResultsHelp() string {
	var parts []string
	for r := range converge.KeyResult(converge.KeyResultCount) {
		parts = append(parts, r.String()+" ("+r.Says()+")")
	}
	return strings.Join(parts, ", ")
}

// convergeKeys counts n keys of running pods with result.
func (m *metrics) convergeKeys(result converge.KeyResult, n int) {
	if m == nil || n == 0 {
		return
	}
	m.convergedKeys[result].Add(float64(n))
}

// podHealed: the pod's containers have the defaults now (a convergence).
func (m *metrics) podHealed(podID string) {
	if m == nil {
		return
	}
	m.lacking.forget(podID)
}

// podConverged counts a running pod a convergence changed.
func (m *metrics) podConverged() {
	if m == nil {
		return
	}
	m.convergedPods.Inc()
}

// reloaded counts a config reload.
func (m *metrics) reloaded(err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.reloadsFailed.Inc()
		return
	}
	m.reloadsSucceeded.Inc()
	m.lastReloadSucceeded.SetToCurrentTime()
}

// connected records whether the plugin is registered: from its Configure
// answer until the NRI connection ends. A new connection is healthy only
// after its Synchronize.
func (m *metrics) connected(up bool) {
	if m == nil {
		return
	}
	m.registered.Store(up)
	if !up {
		m.synchronized.Store(false)
	}
}

// synchronizedWith records the runtime's Synchronize and the running
// containers it found without the defaults.
func (m *metrics) synchronizedWith(lacking []*api.Container) {
	if m == nil {
		return
	}
	byPod := make(map[string]int, len(lacking))
	for _, c := range lacking {
		byPod[c.GetPodSandboxId()]++
	}
	m.lacking.set(byPod)
	m.synchronized.Store(true)
}

// podRemoved drops the pod's containers from the lacking count.
func (m *metrics) podRemoved(podID string) {
	if m == nil {
		return
	}
	m.lacking.forget(podID)
}

// healthy: registered with the runtime, synchronized, and containerd
// answers pod lookups, so that pods created now get their defaults.
func (m *metrics) healthy(ctx context.Context) (bool, string) {
	switch {
	case !m.registered.Load():
		return false, "not registered with the runtime's NRI"
	case !m.synchronized.Load():
		return false, "registered, waiting for the runtime's Synchronize"
	}
	if m.lookupReady != nil {
		if ok, why := m.lookupReady(ctx); !ok {
			return false, "registered and synchronized, but pods cannot be looked up: " + why
		}
	}
	return true, "ok"
}

func (m *metrics) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ok, why := m.healthy(r.Context())
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, why)
	})
	// Liveness, apart from /healthz: 200 while containerd restarts too.
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := true, "ok"
		if m.alive != nil {
			ok, why = m.alive()
		}
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, why)
	})
	return mux
}

// lackingContainers counts, per pod, the running containers Synchronize
// found without the defaults. A pod leaves the count when it is removed or
// healed; the count is rebuilt whole at each Synchronize.
type lackingContainers struct {
	// some is false on a node where nothing lacks the defaults: forget
	// then costs one atomic load on the create path.
	some  atomic.Bool
	mu    sync.Mutex
	byPod map[string]int
	sum   atomic.Int64
}

func (l *lackingContainers) set(byPod map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.byPod = byPod
	sum := 0
	for _, n := range byPod {
		sum += n
	}
	l.sum.Store(int64(sum))
	l.some.Store(sum > 0)
}

func (l *lackingContainers) forget(podID string) {
	if !l.some.Load() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n, ok := l.byPod[podID]; ok {
		delete(l.byPod, podID)
		l.some.Store(len(l.byPod) > 0)
		l.sum.Add(-int64(n))
	}
}

func (l *lackingContainers) total() int64 { return l.sum.Load() }

// metricsListener serves /metrics, /healthz and /livez once an address is known:
// --metrics-address, else the config's metricsAddress.
type metricsListener struct {
	flag string
	mu   sync.Mutex
	addr string // the address asked for; "" while metrics are off
	// bound is the address really listened on (a port 0 picks one).
	bound  string
	server *http.Server
}

// metricsMaxConns caps the connections the metrics listener holds: a few
// scrapers and the kubelet's probes need a handful, and each costs some
// KiB of buffers and a goroutine.
const metricsMaxConns = 64

// serveMetrics starts serving metrics the first time the flag or a config
// names an address. A later config cannot move them: that needs a restart.
func (p *plugin) serveMetrics(cfg *config.Config) error {
	l := &p.metricsListener
	addr := cmp.Or(l.flag, cfg.MetricsAddress)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.addr != "" {
		if addr != l.addr {
			p.log.WithFields(logrus.Fields{"address": l.addr, "configured": addr}).Warn("metricsAddress changed; metrics stay where they are until the plugin restarts")
		}
		return nil
	}
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics address %s: %w", addr, err)
	}
	m := p.newMetrics()
	p.meter.Store(m)
	l.addr, l.bound = addr, ln.Addr().String()
	// Anything that can reach the port may open connections and keep
	// them: they are capped, idle ones shed first so that a probe gets
	// in, and each one is bounded in time and header size.
	limited := connlimit.New(ln, metricsMaxConns)
	l.server = &http.Server{
		Handler:           m.handler(),
		ConnState:         limited.Track,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    8 << 10,
	}
	go func(srv *http.Server) {
		if err := srv.Serve(limited); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.WithError(err).WithField("address", addr).Error("metrics server stopped")
		}
	}(l.server)
	p.log.WithField("address", l.bound).Info("serving /metrics, /healthz and /livez")
	return nil
}

// newMetrics makes the plugin's metrics; config_info reads the config and
// mode in force at each scrape.
func (p *plugin) newMetrics() *metrics {
	m := newMetrics(func() (string, string) {
		return p.current.Load().cfg.TextSHA256, string(p.mode())
	})
	m.lookupReady = p.lookupReady
	m.alive = p.alive
	return m
}

// close stops serving metrics.
func (l *metricsListener) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.server != nil {
		l.server.Close()
	}
}

// checkMetricsAddress refuses a --metrics-address that is not host:port.
func checkMetricsAddress(addr string) error {
	if addr == "" {
		return nil
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return fmt.Errorf("bad --metrics-address %q: want host:port, e.g. 127.0.0.1:9465", addr)
	}
	return nil
}
