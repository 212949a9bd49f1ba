package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/nswrite"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/sirupsen/logrus"
)

// Annotations recorded on each container the plugin decides for, so that
// `crictl inspect` shows what it did, and so that a restarted plugin can
// tell at Synchronize which running containers it never saw.
const (
	annotationInjected = "nri-sysctl.io/injected"
	annotationSkipped  = "nri-sysctl.io/skipped"
	annotationOutcome  = "nri-sysctl.io/outcome"
)

// Outcomes of one container's decision, in the outcome annotation and logs.
const (
	outcomeApplied        = "applied"
	outcomeNothingToApply = "nothing_to_apply"
	outcomeExcluded       = "excluded"
	outcomeLookupFailed   = "lookup_failed"
	outcomeWriteFailed    = "write_failed"
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
	// lacking counts running containers that lack the defaults, as of
	// the last Synchronize.
	lacking atomic.Int64
	// modeLogged: the first mode chosen is logged even if it is the default.
	modeLogged atomic.Bool
	// writeNamespaces is swapped in tests.
	writeNamespaces func(nswrite.Target, []sysctl.Sysctl) []nswrite.WriteError
	// meter counts for /metrics; nil while metrics are off (metrics.go).
	meter           atomic.Pointer[metrics]
	metricsListener metricsListener
	// lastGoodPath (--last-good-config, lastgood.go) and events
	// (--kubernetes-events, events.go): both off when zero.
	lastGoodPath string
	events       *eventRecorder
}

func newPlugin(log *logrus.Logger, check config.KernelChecker, modeOverride runtimemode.Mode) *plugin {
	p := &plugin{
		log:             log,
		check:           check,
		modeOverride:    modeOverride,
		records:         newPodRecords(),
		writeNamespaces: nswrite.Write,
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

func (p *plugin) mode() runtimemode.Mode { return p.applyMode.Load().(runtimemode.Mode) }

// record returns the pod's record, made with the config and mode in force
// when the pod is first seen.
func (p *plugin) record(pod *api.PodSandbox, event string) *podRecord {
	return p.records.get(pod.GetId(), func() *podRecord {
		return &podRecord{cfg: p.current.Load(), mode: p.mode(), firstSeen: event}
	})
}

// podLog carries the pod's identity on every line about it.
func (p *plugin) podLog(pod *api.PodSandbox) *logrus.Entry {
	return p.log.WithFields(logrus.Fields{"pod": pod.GetName(), "namespace": pod.GetNamespace()})
}

// Configure takes the config text containerd passes to a pre-installed
// plugin, and picks how sysctls reach pods on this runtime. A mode that
// would crash the runtime fails the registration.
func (p *plugin) Configure(_ context.Context, text, runtimeName, runtimeVersion string) (api.EventMask, error) {
	rt := runtimemode.Runtime{Name: runtimeName, Version: runtimeVersion}
	if p.stub != nil {
		rt.NRIVersion = reportedNRIVersion(p.stub.RuntimeNRIVersion(), runtimeName, runtimeVersion)
	}
	p.runtime.Store(&rt)
	if strings.TrimSpace(text) != "" {
		cfg, err := config.Parse("NRI plugin config", []byte(text), p.check)
		if err == nil {
			err = p.applyConfig(cfg)
		}
		if err != nil {
			p.log.WithError(err).Error("rejecting config from the runtime")
			return 0, err
		}
		p.log.WithFields(logrus.Fields{"defaults": len(cfg.Sysctls), "rules": len(cfg.Rules)}).Info("config from the runtime")
	} else if err := p.setMode(p.current.Load().cfg); err != nil {
		p.log.WithError(err).Error("refusing to register")
		return 0, err
	}
	p.meter.Load().connected(true)
	return api.MustParseEventMask("RunPodSandbox", "CreateContainer", "RemovePodSandbox"), nil
}

// reportedNRIVersion keeps the NRI version only when the runtime reported
// it: the stub fills in a guess from its own table otherwise, and that
// table stops at containerd 2.2.1 (it calls 2.3 and later v0.11.0).
func reportedNRIVersion(stubVersion, runtimeName, runtimeVersion string) string {
	switch stubVersion {
	case "", api.UnknownVersion, api.DevelVersion:
		return ""
	}
	if inferred, err := api.InferVersionFromRuntime(runtimeName, runtimeVersion); err == nil && inferred == stubVersion {
		return ""
	}
	return stubVersion
}

// chooseMode: the --mode flag, then the config's mode, then the runtime.
// A forced spec mode that would crash the runtime is refused.
func (p *plugin) chooseMode(cfg *config.Config, rt runtimemode.Runtime) (runtimemode.Mode, string, error) {
	mode, why := p.modeOverride, "set by --mode"
	if mode == runtimemode.Auto || mode == "" {
		mode, why = runtimemode.Mode(cfg.Mode), "set by the config's mode"
	}
	if mode == runtimemode.Auto || mode == "" {
		mode, why = runtimemode.Decide(rt)
		return mode, why, nil
	}
	return mode, why, runtimemode.RefuseForced(mode, rt)
}

// setMode puts in force the mode cfg and the runtime call for. Before
// Configure the runtime is unknown and nothing changes.
func (p *plugin) setMode(cfg *config.Config) error {
	rt := p.runtime.Load()
	if rt == nil {
		return nil
	}
	mode, why, err := p.chooseMode(cfg, *rt)
	if err != nil {
		return err
	}
	if old := p.mode(); old != mode || !p.modeLogged.Swap(true) {
		p.log.WithFields(logrus.Fields{"runtime": rt.String(), "mode": mode, "reason": why}).Info("mode chosen")
	}
	p.applyMode.Store(mode)
	return nil
}

// RunPodSandbox writes the pod's sysctls into its namespaces in namespace
// mode, before any app container exists. In spec mode it starts looking
// the pod up, while the runtime finishes starting it.
func (p *plugin) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	rec := p.record(pod, "RunPodSandbox")
	if rec.cfg.policy.Empty() || rec.cfg.policy.Excluded(podInfo(pod)) != "" {
		return nil
	}
	if rec.mode != runtimemode.Namespace {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), prefetchTimeout)
			defer cancel()
			_, _ = p.ownSysctls(ctx, rec, pod)
		}()
		return nil
	}
	ctx, cancel := p.withinDeadline(ctx)
	defer cancel()
	d, own, ok := p.decideForPod(ctx, rec, pod, nil)
	if !ok {
		return nil
	}
	return p.writeIntoPod(ctx, rec, pod, d, own, "RunPodSandbox")
}

// writeIntoPod writes what the pod's namespaces still lack: all of it at
// RunPodSandbox, or at a container's creation whatever an earlier attempt
// missed (the plugin was down, or a write failed with onError: warn).
func (p *plugin) writeIntoPod(ctx context.Context, rec *podRecord, pod *api.PodSandbox, d policy.Decision, own podsysctl.PodSysctls, event string) error {
	ctx, cancel := p.withinDeadline(ctx)
	defer cancel()
	log := p.podLog(pod).WithField("event", event)
	written, _, _ := rec.namespaceOutcome()
	var pending []sysctl.Sysctl
	for _, s := range d.Apply {
		if !hasKey(written, s.Key()) {
			pending = append(pending, s)
		}
	}
	var errs []nswrite.WriteError
	switch {
	case len(pending) == 0:
	case ctx.Err() != nil:
		// Nothing is written once the runtime may have moved on.
		for _, s := range pending {
			errs = append(errs, nswrite.WriteError{Key: s.Key(), Err: fmt.Errorf("not written: the runtime's request deadline passed (%w)", context.Cause(ctx))})
		}
	default:
		values, valueErrs := hostSideValues(pending, own.GIDMappings, pod)
		errs = append(valueErrs, p.writeNamespaces(namespaceTarget(pod), values)...)
	}
	rec.recordWrite(event, pending, errs)
	p.meter.Load().namespaceWritten(len(pending), len(errs))
	if len(errs) == 0 {
		if len(pending) > 0 && log.Logger.IsLevelEnabled(logrus.DebugLevel) {
			log.WithField("sysctls", formatApplied(pending)).Debug("wrote into the pod's namespaces")
		}
		return nil
	}
	for _, e := range errs {
		log.WithFields(logrus.Fields{"key": e.Key, "reason": e.Err.Error()}).Warn("cannot set sysctl in the pod's namespaces")
	}
	err := fmt.Errorf("nri-sysctl: pod %s: cannot set %d sysctl(s) in its namespaces: %w", podName(pod), len(errs), joinWriteErrors(errs))
	if rec.cfg.cfg.OnError == config.OnErrorWarn {
		log.WithError(err).Warn("onError: warn, the pod goes on; the keys are tried again at its next container")
		return nil
	}
	log.WithError(err).Error("failing the request")
	return err
}

// hostSideValues rewrites values that name IDs into the host's IDs: in
// namespace mode the plugin writes from the host's user namespace, and the
// kernel reads ping_group_range's GIDs in the writer's namespace.
func hostSideValues(list []sysctl.Sysctl, gids []policy.IDMapping, pod *api.PodSandbox) ([]sysctl.Sysctl, []nswrite.WriteError) {
	if !podInfo(pod).Own.Has(sysctl.User) {
		return list, nil
	}
	out := make([]sysctl.Sysctl, 0, len(list))
	var errs []nswrite.WriteError
	for _, s := range list {
		if s.Key() == "net.ipv4.ping_group_range" {
			host, err := policy.HostPingGroupRange(s.Value(), gids)
			if err != nil {
				errs = append(errs, nswrite.WriteError{Key: s.Key(), Err: err})
				continue
			}
			s = sysctl.New(s.Key(), host)
		}
		out = append(out, s)
	}
	return out, errs
}

// CreateContainer sets the sysctls on the container's spec in spec mode;
// in namespace mode it writes what the pod's namespaces still lack. In
// both modes it annotates what the container really got.
func (p *plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	rec := p.record(pod, "CreateContainer")
	if rec.cfg.policy.Empty() {
		return nil, nil, nil
	}
	// Built only for a line that is written: it allocates.
	log := func() *logrus.Entry { return p.podLog(pod).WithField("container", ctr.GetName()) }
	if why := rec.cfg.policy.Excluded(podInfo(pod)); why != "" {
		p.meter.Load().containerOutcome(outcomeExcluded)
		if p.log.IsLevelEnabled(logrus.DebugLevel) {
			log().WithFields(logrus.Fields{"outcome": outcomeExcluded, "reason": why}).Debug("decision")
		}
		// Only the outcome: a restarted plugin, or audit, can then tell
		// an excluded container from one created while it was away.
		return outcomeOnly(outcomeExcluded), nil, nil
	}
	if rec.mode == runtimemode.Namespace {
		return p.createInNamespaceMode(ctx, rec, pod, log)
	}
	d, _, ok := p.decideForPod(ctx, rec, pod, ctr.GetLinux().GetSysctl())
	if !ok {
		p.meter.Load().containerOutcome(outcomeLookupFailed)
		return outcomeOnly(outcomeLookupFailed), nil, nil
	}
	adj := &api.ContainerAdjustment{}
	for _, s := range d.Apply {
		adj.SetLinuxSysctl(s.Key(), s.Value())
	}
	annotate(adj, d.Apply, formatSkipped(d.Skipped), appliedOrNothing(d.Apply))
	p.meter.Load().decided(pod.GetId(), appliedOrNothing(d.Apply), d.Apply, d.Skipped, 0)
	if p.log.IsLevelEnabled(logrus.DebugLevel) {
		logDecision(log(), d.Apply, formatSkipped(d.Skipped))
		logSkippedKeys(log(), d.Skipped)
	}
	return adj, nil, nil
}

// createInNamespaceMode heals a pod whose namespaces still lack their
// sysctls, then annotates the container with what the pod really holds.
func (p *plugin) createInNamespaceMode(ctx context.Context, rec *podRecord, pod *api.PodSandbox, log func() *logrus.Entry) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	d, own, ok := p.decideForPod(ctx, rec, pod, nil)
	if !ok {
		p.meter.Load().containerOutcome(outcomeLookupFailed)
		return outcomeOnly(outcomeLookupFailed), nil, nil
	}
	if rec.needsWrite() {
		if err := p.writeIntoPod(ctx, rec, pod, d, own, "CreateContainer"); err != nil {
			p.meter.Load().containerOutcome(outcomeWriteFailed)
			return nil, nil, err
		}
	}
	written, errs, state := rec.namespaceOutcome()
	skipped := formatSkipped(d.Skipped)
	for _, e := range errs {
		skipped = joinNonEmpty(skipped, e.Key+" (write failed: "+e.Err.Error()+")")
	}
	outcome := appliedOrNothing(written)
	if state == writeFailed {
		outcome = outcomeWriteFailed
	}
	adj := &api.ContainerAdjustment{}
	annotate(adj, written, skipped, outcome)
	p.meter.Load().decided(pod.GetId(), outcome, written, d.Skipped, len(errs))
	if p.log.IsLevelEnabled(logrus.DebugLevel) {
		logDecision(log(), written, skipped)
		logSkippedKeys(log(), d.Skipped)
	}
	return adj, nil, nil
}

func appliedOrNothing(applied []sysctl.Sysctl) string {
	if len(applied) > 0 {
		return outcomeApplied
	}
	return outcomeNothingToApply
}

func outcomeOnly(outcome string) *api.ContainerAdjustment {
	adj := &api.ContainerAdjustment{}
	adj.AddAnnotation(annotationOutcome, outcome)
	return adj
}

func annotate(adj *api.ContainerAdjustment, applied []sysctl.Sysctl, skipped, outcome string) {
	if len(applied) > 0 {
		adj.AddAnnotation(annotationInjected, formatApplied(applied))
	}
	if skipped != "" {
		adj.AddAnnotation(annotationSkipped, skipped)
	}
	adj.AddAnnotation(annotationOutcome, outcome)
}

func logDecision(log *logrus.Entry, applied []sysctl.Sysctl, skipped string) {
	log.WithFields(logrus.Fields{"applied": formatApplied(applied), "skipped": skipped, "outcome": appliedOrNothing(applied)}).Debug("decision")
}

func joinNonEmpty(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
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

// Synchronize counts running containers that lack the defaults: created
// while the plugin was away (fail-open). It also forgets pods removed while
// the plugin was away: their RemovePodSandbox never reached it. The runtime
// sends no event to a plugin until its Synchronize has returned, so pods
// not in the list have no event in flight.
func (p *plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	defer p.synchronizedOnce.Do(func() { close(p.synchronized) })
	byID := make(map[string]*api.PodSandbox, len(pods))
	for _, pod := range pods {
		byID[pod.GetId()] = pod
	}
	p.records.retain(func(id string) bool { return byID[id] != nil })
	missing := lackingDefaults(p.current.Load().policy, byID, ctrs)
	p.lacking.Store(int64(len(missing)))
	p.meter.Load().synchronizedWith(missing)
	if len(missing) > 0 {
		p.log.WithField("containers", len(missing)).Warn("running containers lack the node's sysctl defaults: they were created while the plugin was not registered; they get them when their pod creates its next container")
		for _, c := range missing {
			pod := byID[c.GetPodSandboxId()]
			p.podLog(pod).WithField("container", c.GetName()).Info("lacks the node's sysctl defaults")
		}
	}
	return nil, nil
}

// lackingDefaults lists running containers the plugin never decided for
// (no outcome annotation, nor the older injected/skipped ones) in pods that
// are not excluded and would get something.
func lackingDefaults(pol *policy.Policy, pods map[string]*api.PodSandbox, ctrs []*api.Container) []*api.Container {
	if pol.Empty() {
		return nil
	}
	var out []*api.Container
	for _, c := range ctrs {
		pod := pods[c.GetPodSandboxId()]
		if pod == nil || c.GetState() != api.ContainerState_CONTAINER_RUNNING {
			continue
		}
		ann := c.GetAnnotations()
		if _, ok := ann[annotationOutcome]; ok {
			continue
		}
		if _, ok := ann[annotationInjected]; ok {
			continue
		}
		if _, ok := ann[annotationSkipped]; ok {
			continue
		}
		// Without the pod's own sysctls (not looked up here) this is an
		// upper bound: a pod that sets every key itself lacks nothing.
		if d := pol.Decide(policy.Input{Pod: podInfo(pod)}); d.Excluded == "" && len(d.Apply) > 0 {
			out = append(out, c)
		}
	}
	return out
}

// RemovePodSandbox drops the pod's record.
func (p *plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.records.forget(pod.GetId())
	p.meter.Load().podRemoved(pod.GetId())
	// What the plugin keeps per pod, for the churn benchmark (make
	// bench-churn): it must drop to 0 once every pod is removed.
	if p.log.IsLevelEnabled(logrus.DebugLevel) {
		p.log.WithField("pods", p.records.len()).Debug("pod records")
	}
	return nil
}

// ownSysctls looks the pod's own sysctls up once per pod (again after a
// failure), reporting the first failure and any odd source.
func (p *plugin) ownSysctls(ctx context.Context, rec *podRecord, pod *api.PodSandbox) (podsysctl.PodSysctls, bool) {
	own, fresh, err := rec.ownSysctls(ctx, p.withinDeadline, rec.cfg.lookup.Fetch)
	if err == nil && !fresh {
		return own, true // the record's: the common case, kept cheap
	}
	log := p.podLog(pod)
	if err != nil {
		if fresh {
			log.WithError(err).Warn("cannot read the pod's own sysctls, so setting none (never override a pod's value); trying again at its next container")
		} else if log.Logger.IsLevelEnabled(logrus.DebugLevel) {
			log.WithError(err).Debug("pod lookup failed again")
		}
		return own, false
	}
	if fresh && own.Source != podsysctl.SourceSandboxConfig {
		log.WithField("source", own.Source).Warn("read the pod's sysctls from a source with the runtime's own keys; they count as the pod's own")
	}
	return own, true
}

// decideForPod gathers the inputs for one pod and runs the pure decision.
// ok is false when nothing may be set because the pod's own sysctls are
// unknown.
func (p *plugin) decideForPod(ctx context.Context, rec *podRecord, pod *api.PodSandbox, existing map[string]string) (policy.Decision, podsysctl.PodSysctls, bool) {
	own, ok := p.ownSysctls(ctx, rec, pod)
	if !ok {
		return policy.Decision{}, own, false
	}
	in := policy.Input{Pod: podInfo(pod), Existing: normalizedKeys(existing), PodOwn: own.Own, GIDMappings: own.GIDMappings, Writer: writerFor(rec.mode)}
	return rec.cfg.policy.Decide(in), own, true
}

// writerFor tells who writes the sysctls in a mode: runc inside the pod in
// spec mode, the plugin as host root in namespace mode.
func writerFor(m runtimemode.Mode) sysctl.Writer {
	if m == runtimemode.Spec {
		return sysctl.WriterInPod
	}
	return sysctl.WriterHost
}

// normalizedKeys puts keys another plugin set in slash form into dot form,
// so that the decision recognises them.
func normalizedKeys(in map[string]string) map[string]string {
	for k := range in {
		if sysctl.Normalize(k) != k {
			out := make(map[string]string, len(in))
			for k, v := range in {
				out[sysctl.Normalize(k)] = v
			}
			return out
		}
	}
	return in
}

func podName(pod *api.PodSandbox) string {
	return pod.GetNamespace() + "/" + pod.GetName()
}

// podInfo takes the namespaces from the pod sandbox's own list: a missing
// entry means the pod shares the host's.
func podInfo(pod *api.PodSandbox) policy.Pod {
	info := policy.Pod{
		Namespace:      pod.GetNamespace(),
		Name:           pod.GetName(),
		Labels:         pod.GetLabels(),
		RuntimeHandler: pod.GetRuntimeHandler(),
	}
	for _, ns := range pod.GetLinux().GetNamespaces() {
		if kind, ok := sysctl.NamespaceByOCIName(ns.GetType()); ok {
			info.Own = info.Own.With(kind)
		}
	}
	return info
}

// namespaceTarget finds the pod's namespaces: by their path (the network
// one has it), or else through the sandbox's pid.
func namespaceTarget(pod *api.PodSandbox) nswrite.Target {
	t := nswrite.Target{}
	for _, ns := range pod.GetLinux().GetNamespaces() {
		kind, ok := sysctl.NamespaceByOCIName(ns.GetType())
		if !ok {
			continue
		}
		ref := nswrite.NamespaceRef{Path: ns.GetPath()}
		if ref.Path == "" {
			ref.Pid = int(pod.GetPid())
		}
		t[kind] = ref
	}
	return t
}

func formatApplied(list []sysctl.Sysctl) string {
	parts := make([]string, len(list))
	for i, s := range list {
		parts[i] = s.Key() + "=" + s.Value()
	}
	return strings.Join(parts, ",")
}

func formatSkipped(list []policy.Skipped) string {
	parts := make([]string, len(list))
	for i, s := range list {
		parts[i] = s.Key + " (" + s.Reason + ")"
	}
	return strings.Join(parts, "; ")
}

func joinWriteErrors(errs []nswrite.WriteError) error {
	list := make([]error, len(errs))
	for i, e := range errs {
		list[i] = e
	}
	return errors.Join(list...)
}
