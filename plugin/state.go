// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/podstate"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/pkg/probe"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/sirupsen/logrus"
)

// prefetchTimeout bounds a spec-mode lookup started at RunPodSandbox, which
// no request deadline covers.
const prefetchTimeout = 10 * time.Second

// loaded is a validated config, what the user namespace probe found for
// it, its compiled policy, the containerd connection its pods are looked
// up through and the mode its sysctls reach pods in, swapped as one: a pod
// record reads them from one load.
type loaded struct {
	cfg     *config.Config
	refused policy.UserNamespaceRefusals
	policy  *policy.Policy
	lookup  podsysctl.Fetcher
	mode    runtimemode.Mode
}

// plugin is the NRI plugin's state, shared by the handlers, the reloads
// and the metrics listener. What changes while it runs is swapped whole
// through atomic pointers (current, runtime, stub, meter), so a handler
// reads without a lock.
//
// Locks, and the order in which they are taken (one above another only
// in this order; the others are leaves, held for a few lines):
//
//  1. applying: while a config or mode is put in force.
//  2. podsysctl.Pool's lock, under applying when a config names a
//     containerd not yet connected (its own locks are its business).
//  3. metricsListener.mu (metrics.go), under applying when a config moves
//     the metrics address.
//
// Per pod: a record's lookupSlot (a one-slot channel, held by the lookup
// in flight) before its mu; podRecords.mu before a new record's mu, which
// no one else holds yet (record.go), and before runningPods.mu when it
// makes one (newRecord); podRecords.mu also guards each record's
// specLandsBy. Leaves: requestGate.mu (leave.go),
// lackingContainers.mu, runningPods.mu, heldPods.mu and the meter's own.
type plugin struct {
	log          *logrus.Logger
	check        config.KernelChecker
	modeOverride runtimemode.Mode
	// allowInsecureConfig accepts a config file anyone but root could write.
	allowInsecureConfig bool

	current atomic.Pointer[loaded]
	// applying serializes what puts a config or mode in force (a reload,
	// Configure), so that none is lost to another.
	applying sync.Mutex
	runtime  atomic.Pointer[runtimemode.Runtime] // set at Configure
	records  *podRecords

	// connect returns the lookup for a config's containerd; it runs
	// before the config is put in force.
	connect func(*config.Config) (podsysctl.Fetcher, error)
	// stub answers what the runtime told NRI at registration; unset in
	// tests. Each reconnection sets it anew while handlers of the last
	// connection may still read it.
	stub atomic.Pointer[registration]
	// synchronized is closed after the first Synchronize: the runtime
	// sends pod events to the plugin only from then on.
	synchronized     chan struct{}
	synchronizedOnce sync.Once
	// modeLogged: the first mode chosen is logged even if it is the default.
	modeLogged atomic.Bool
	// writeNamespaces is swapped in tests.
	writeNamespaces func(podns.Target, []sysctl.Sysctl) []podns.WriteError
	// readNamespaces reads a pod's values before the plugin writes them
	// (decide.go); swapped in tests.
	readNamespaces func(podns.Target, []string) map[string]podns.Value
	// visitNamespaces reads a running pod's values and writes what its
	// convergence makes of them, in one visit (converge.go); tests make
	// it go through the two above.
	visitNamespaces func(podns.Target, []string, func(map[string]podns.Value) []sysctl.Sysctl) []podns.WriteError
	// freshValues reads keys in namespaces made fresh (converge.go);
	// swapped in tests.
	freshValues func([]string) (map[string]string, error)
	// afterAnswer runs work a handler leaves for after its answer (spec
	// mode's hold and read at RunPodSandbox): in a goroutine; the model
	// test runs it in line, to replay a sequence exactly.
	afterAnswer func(func())
	// meter counts for /metrics; nil while metrics are off (metrics.go).
	meter           atomic.Pointer[metrics]
	metricsListener metricsListener
	// live is what /livez reads (liveness.go).
	live liveness
	// requests counts the NRI requests under way, so that the plugin
	// leaves without losing an answer (leave.go).
	requests requestGate
	// leaveWait bounds how long a stopping plugin whose sweeper could not
	// register waits for a pod event to close its connection in
	// (leave.go); shortened in tests.
	leaveWait time.Duration
	// sweepSocket is the NRI socket a stopping plugin registers its
	// sweeper on, as sweepName-leaving at index sweepIdx (leave.go); ""
	// for none.
	sweepSocket, sweepName, sweepIdx string
	// lastGoodPath (--last-good-config, lastgood.go) and events
	// (--kubernetes-events, events.go): lastGoodPath off when empty, events
	// noEvents unless set.
	lastGoodPath string
	events       eventSink

	// running, convergeKick and podState serve convergence (converge.go):
	// the pods the runtime runs, a pass asked for, and what the plugin
	// set in each pod (nil: kept in memory only).
	running      runningPods
	convergeKick chan struct{}
	// keepKick asks the worker to keep what the plugin set in pods
	// (keepset.go).
	keepKick chan struct{}
	// held holds each running pod's sandbox process from its first sight
	// (held.go): every visit to a pod's namespaces goes through it.
	held heldPods
	// convergeRetry asks for a pass once containers decided under an
	// older config have landed (convergeLater); the worker's alone.
	convergeRetry *time.Timer
	// convergePace rests the worker between pods (pacer); the worker's
	// alone.
	convergePace pacer
	podState     *podstate.Store
	// runningPodsOverride is --running-pods: it wins over the config's
	// runningPods when set, as --mode wins over its mode.
	runningPodsOverride string
}

func newPlugin(log *logrus.Logger, check config.KernelChecker, modeOverride runtimemode.Mode) *plugin {
	if modeOverride == "" {
		modeOverride = runtimemode.Auto
	}
	p := &plugin{
		log:             log,
		check:           check,
		modeOverride:    modeOverride,
		records:         newPodRecords(),
		held:            newHeldPods(),
		writeNamespaces: podns.Write,
		readNamespaces:  podns.Read,
		visitNamespaces: podns.Visit,
		freshValues:     probe.Fresh,
		afterAnswer:     func(work func()) { go work() },
		synchronized:    make(chan struct{}),
		events:          noEvents{},
		connect:         func(*config.Config) (podsysctl.Fetcher, error) { return noLookup{}, nil },
		live:            liveness{stuckAfter: stuckAfter},
		leaveWait:       leaveWait,
		convergeKick:    make(chan struct{}, 1),
		keepKick:        make(chan struct{}, 1),
		convergePace:    pacer{share: convergeShare, sleep: time.Sleep, cpu: processCPU},
	}
	p.current.Store(&loaded{cfg: &config.Config{Mode: runtimemode.Auto, OnError: config.OnErrorFail}, policy: policy.Compile(&config.Config{}, nil), lookup: noLookup{}, mode: runtimemode.Spec})
	return p
}

// runtimeInfo is what a connection's stub tells of the runtime.
type runtimeInfo interface {
	RuntimeNRIVersion() string
	RequestTimeout() time.Duration
}

// registration holds the stub of the connection now serving.
type registration struct {
	runtime runtimeInfo
	// failurePolicy is what the stub sends in its Configure reply, read
	// after Configure returns: Configure fills it (failurepolicy.go).
	// nil where the connection sends none.
	failurePolicy *api.FailurePolicy
	// declared is the onMissedDeadline value the runtime was given.
	declared atomic.Value
}

// setStub makes s the stub of the connection now serving, which sends
// failurePolicy when it registers.
func (p *plugin) setStub(s runtimeInfo, failurePolicy *api.FailurePolicy) {
	p.stub.Store(&registration{runtime: s, failurePolicy: failurePolicy})
}

// noLookup serves until a config names a containerd.
type noLookup struct{}

func (noLookup) Fetch(context.Context, string) (podsysctl.PodSysctls, error) {
	return podsysctl.PodSysctls{}, errors.New("no containerd connection configured")
}

// Answers: no containerd to look pods up in is not ready.
func (noLookup) Answers(context.Context) (bool, string) {
	return false, "containerd: no connection configured to look pods up"
}

// lookupReady tells whether containerd answers on the lookup in force.
func (p *plugin) lookupReady(ctx context.Context) (bool, string) {
	return podsysctl.Answers(ctx, p.current.Load().lookup)
}

// record returns the pod's record, made with the config and mode in force
// when the pod is first seen.
func (p *plugin) record(pod *api.PodSandbox) *podRecord {
	return p.records.get(pod.GetId(), func() *podRecord { return p.newRecord(pod) })
}

// newRecord is the record of a pod first seen now. A pod that had
// containers when the plugin first saw it has its values in place
// (podRecord.inPlace): whatever it holds, someone may have set it, so
// only a convergence, reading first, writes into it.
func (p *plugin) newRecord(pod *api.PodSandbox) *podRecord {
	rec := newPodRecord(p.current.Load(), pod)
	if p.running.listedWithContainers(pod.GetId()) {
		rec.inPlace, rec.writes = true, writeDone
	}
	if rec.cfg.mode != runtimemode.Namespace {
		rec.landing, rec.carried = landingRecords(p.running.landingAtSync(pod.GetId()))
	}
	return rec
}

// recordForContainer is record for a container's decision: a spec-mode
// record is marked as one whose values may land in the pod for
// specLanding from now (podRecords.getForContainer).
func (p *plugin) recordForContainer(pod *api.PodSandbox) *podRecord {
	return p.records.getForContainer(pod.GetId(), func() *podRecord { return p.newRecord(pod) }, time.Now().Add(specLanding))
}

// podLog carries the pod's identity on every line about it.
func (p *plugin) podLog(pod *api.PodSandbox) *logrus.Entry {
	return p.log.WithFields(logrus.Fields{"pod": pod.GetName(), "namespace": pod.GetNamespace()})
}

// recordLog is podLog for a pod known by its record. Kept out of line:
// inlined, its fields would grow the frame of every caller on the create
// path, and with it the stacks of the goroutines a new pod starts.
//
//go:noinline
func (p *plugin) recordLog(rec *podRecord) *logrus.Entry {
	return p.log.WithFields(logrus.Fields{"pod": rec.pod.Name, "namespace": rec.pod.Namespace})
}

// requestTimeout is how long the runtime waits for the plugin's answer.
func (p *plugin) requestTimeout() time.Duration {
	if r := p.stub.Load(); r != nil && r.runtime.RequestTimeout() > 0 {
		return r.runtime.RequestTimeout()
	}
	return api.DefaultPluginRequestTimeout
}

// withinDeadline bounds the work for one request by the runtime's deadline
// less a margin, so that the answer (and any write) never comes after the
// runtime gave up on the plugin.
func (p *plugin) withinDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Value(withinDeadlineKey{}) != nil {
		// Already bounded by an outer call: the margin is kept once.
		return context.WithCancel(ctx)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(p.requestTimeout())
	}
	ctx, cancel := context.WithDeadline(ctx, deadline.Add(-p.deadlineMargin()))
	return context.WithValue(ctx, withinDeadlineKey{}, true), cancel
}

// withinDeadlineKey marks a context withinDeadline has bounded.
type withinDeadlineKey struct{}

// deadlineMargin is kept back from the runtime's deadline for the answer
// to reach it: a tenth of it, within 50-500 ms.
func (p *plugin) deadlineMargin() time.Duration {
	return min(max(p.requestTimeout()/10, 50*time.Millisecond), 500*time.Millisecond)
}
