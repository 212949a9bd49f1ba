package main

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/sirupsen/logrus"
)

// prefetchTimeout bounds a spec-mode lookup started at RunPodSandbox, which
// no request deadline covers.
const prefetchTimeout = 10 * time.Second

// loaded is a validated config, its compiled policy and the containerd
// connection its pods are looked up through, swapped as one.
type loaded struct {
	cfg    *config.Config
	policy *policy.Policy
	lookup podsysctl.Fetcher
}

type plugin struct {
	log          *logrus.Logger
	check        config.KernelChecker
	modeOverride runtimemode.Mode
	// allowInsecureConfig accepts a config file anyone but root could write.
	allowInsecureConfig bool

	current   atomic.Pointer[loaded]
	runtime   atomic.Pointer[runtimemode.Runtime] // set at Configure
	applyMode atomic.Value                        // runtimemode.Mode
	records   *podRecords

	// connect returns the lookup for a config's containerd; it runs
	// before the config is put in force.
	connect func(*config.Config) (podsysctl.Fetcher, error)
	// stub answers what the runtime told NRI at registration; nil in tests.
	stub interface {
		RuntimeNRIVersion() string
		RequestTimeout() time.Duration
	}
	// synchronized is closed after the first Synchronize: the runtime
	// sends pod events to the plugin only from then on.
	synchronized     chan struct{}
	synchronizedOnce sync.Once
	// modeLogged: the first mode chosen is logged even if it is the default.
	modeLogged atomic.Bool
	// writeNamespaces is swapped in tests.
	writeNamespaces func(podns.Target, []sysctl.Sysctl) []podns.WriteError
	// meter counts for /metrics; nil while metrics are off (metrics.go).
	meter           atomic.Pointer[metrics]
	metricsListener metricsListener
}

func newPlugin(log *logrus.Logger, check config.KernelChecker, modeOverride runtimemode.Mode) *plugin {
	p := &plugin{
		log:             log,
		check:           check,
		modeOverride:    modeOverride,
		records:         newPodRecords(),
		writeNamespaces: podns.Write,
		synchronized:    make(chan struct{}),
		connect:         func(*config.Config) (podsysctl.Fetcher, error) { return noLookup{}, nil },
	}
	p.applyMode.Store(runtimemode.Spec)
	p.current.Store(&loaded{cfg: &config.Config{Mode: config.ModeAuto, OnError: config.OnErrorFail}, policy: policy.Compile(&config.Config{}), lookup: noLookup{}})
	return p
}

// noLookup serves until a config names a containerd.
type noLookup struct{}

func (noLookup) Fetch(context.Context, string) (podsysctl.PodSysctls, error) {
	return podsysctl.PodSysctls{}, errors.New("no containerd connection configured")
}

// record returns the pod's record, made with the config and mode in force
// when the pod is first seen.
func (p *plugin) record(pod *api.PodSandbox) *podRecord {
	return p.records.get(pod.GetId(), func() *podRecord {
		return &podRecord{cfg: p.current.Load(), mode: p.mode()}
	})
}

// podLog carries the pod's identity on every line about it.
func (p *plugin) podLog(pod *api.PodSandbox) *logrus.Entry {
	return p.log.WithFields(logrus.Fields{"pod": pod.GetName(), "namespace": pod.GetNamespace()})
}

// withinDeadline bounds the work for one request by the runtime's deadline
// less a margin, so that the answer (and any write) never comes after the
// runtime gave up on the plugin.
func (p *plugin) withinDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	timeout := api.DefaultPluginRequestTimeout
	if p.stub != nil && p.stub.RequestTimeout() > 0 {
		timeout = p.stub.RequestTimeout()
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(timeout)
	}
	margin := min(max(timeout/10, 50*time.Millisecond), 500*time.Millisecond)
	return context.WithDeadline(ctx, deadline.Add(-margin))
}
