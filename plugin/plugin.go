package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/nswrite"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/pkg/probe"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/sirupsen/logrus"
)

// Annotations recorded on each container the plugin touches, so that
// `crictl inspect` shows what it did.
const (
	annotationInjected = "nri-sysctl.io/injected"
	annotationSkipped  = "nri-sysctl.io/skipped"
)

// loaded is a validated config and its compiled policy, swapped as one.
type loaded struct {
	cfg    *config.Config
	policy *policy.Policy
}

type plugin struct {
	log          *logrus.Logger
	check        config.KernelChecker
	modeOverride string
	// allowInsecureConfig accepts a config file anyone but root could write.
	allowInsecureConfig bool
	current             atomic.Pointer[loaded]
	pods                *podsysctl.Cache
	applyMode           atomic.Value // runtimemode.Mode
	// pinned holds the config each pod was first decided with, until
	// RemovePodSandbox: a reload applies to pods created after it, never
	// to part of a pod's containers.
	pinMu  sync.Mutex
	pinned map[string]*loaded
	// retarget, when set, points pod lookups at the containerd the config
	// names; it runs before a new config is put in force.
	retarget func(*config.Config) error
	// writeNamespaces is swapped in tests.
	writeNamespaces func(nswrite.Target, []sysctl.Sysctl) []nswrite.WriteError
}

func newPlugin(log *logrus.Logger, check config.KernelChecker, modeOverride string) *plugin {
	p := &plugin{log: log, check: check, modeOverride: modeOverride, writeNamespaces: nswrite.Write, pinned: map[string]*loaded{}}
	p.applyMode.Store(runtimemode.Spec)
	p.setConfig(&config.Config{Mode: config.ModeAuto, OnError: config.OnErrorFail})
	return p
}

func (p *plugin) setConfig(cfg *config.Config) {
	p.current.Store(&loaded{cfg: cfg, policy: policy.Compile(cfg)})
}

// applyConfig puts a validated config in force, first moving pod lookups
// to the containerd it names.
func (p *plugin) applyConfig(cfg *config.Config) error {
	if keys := cfg.AllKeys(); p.check != nil && len(keys) > 0 {
		refused, err := probeUserNamespace(keys)
		if errors.Is(err, probe.ErrUserNamespacesDisabled) {
			p.log.Warnf("%v: no pod can have a user namespace, so no key is left out for one", err)
			refused, err = nil, nil
		}
		if err != nil {
			// Without a result, user-namespace pods would get keys the
			// kernel refuses them: keep the last result if it covers
			// every key, or else keep the config in force.
			prev := p.current.Load().cfg
			if prev.RefusedInUserNamespace == nil || !allIn(keys, prev.AllKeys()) {
				return fmt.Errorf("cannot tell which sysctls user-namespace pods may set: %w (use --skip-kernel-check to leave the probes out)", err)
			}
			p.log.Warnf("cannot tell which sysctls user-namespace pods may set: %v; keeping the previous result", err)
			cfg.RefusedInUserNamespace = prev.RefusedInUserNamespace
		} else {
			cfg.RefusedInUserNamespace = map[sysctl.Writer]map[string]bool{}
			for w, reasons := range refused {
				cfg.RefusedInUserNamespace[w] = map[string]bool{}
				for _, k := range slices.Sorted(maps.Keys(reasons)) {
					cfg.RefusedInUserNamespace[w][k] = true
					p.log.Infof("user-namespace pods do not get %s when %s writes it: %v (userNamespaceRefused: fail keeps it)", k, w, reasons[k])
				}
			}
		}
	}
	if p.retarget != nil {
		if err := p.retarget(cfg); err != nil {
			return err
		}
	}
	p.setConfig(cfg)
	return nil
}

// probeUserNamespace is swapped in tests.
var probeUserNamespace = probe.UserNamespace

// allIn tells whether every one of keys is in sorted.
func allIn(keys, sorted []string) bool {
	for _, k := range keys {
		if _, found := slices.BinarySearch(sorted, k); !found {
			return false
		}
	}
	return true
}

func (p *plugin) mode() runtimemode.Mode { return p.applyMode.Load().(runtimemode.Mode) }

// configFor returns the config a pod is decided with: the one in force at
// the pod's first event (RunPodSandbox, or its first container when the
// plugin came up after the pod). Without this, a reload between two
// containers of a pod would give them different sysctls, and in namespace
// mode the annotations would not match what RunPodSandbox wrote.
func (p *plugin) configFor(pod *api.PodSandbox) *loaded {
	p.pinMu.Lock()
	defer p.pinMu.Unlock()
	if cur, ok := p.pinned[pod.GetId()]; ok {
		return cur
	}
	cur := p.current.Load()
	p.pinned[pod.GetId()] = cur
	return cur
}

// loadInitialConfig reads the config file. A pre-installed plugin may get
// its config from containerd in Configure instead, so a missing file is
// only an error for a plugin started by hand or by systemd.
func (p *plugin) loadInitialConfig(path string, preinstalled bool) error {
	if preinstalled {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			p.log.Infof("no config file at %s; waiting for the config from the runtime", path)
			return nil
		}
	}
	cfg, err := p.loadFile(path)
	if err != nil {
		return err
	}
	if err := p.applyConfig(cfg); err != nil {
		return err
	}
	p.log.Infof("config %s: %d default(s), %d rule(s)", path, len(cfg.Sysctls), len(cfg.Rules))
	return nil
}

// Configure takes the config text containerd passes to a pre-installed
// plugin, and picks how sysctls reach pods on this runtime.
func (p *plugin) Configure(_ context.Context, text, runtimeName, runtimeVersion string) (api.EventMask, error) {
	if strings.TrimSpace(text) != "" {
		cfg, err := config.Parse("NRI plugin config", []byte(text), p.check)
		if err != nil {
			p.log.Errorf("rejecting config from the runtime: %v", err)
			return 0, err
		}
		if err := p.applyConfig(cfg); err != nil {
			p.log.Errorf("rejecting config from the runtime: %v", err)
			return 0, err
		}
		p.log.Infof("config from the runtime: %d default(s), %d rule(s)", len(cfg.Sysctls), len(cfg.Rules))
	}
	mode, why := p.chooseMode(runtimeName, runtimeVersion)
	p.applyMode.Store(mode)
	p.log.Infof("runtime %s %s: mode %s (%s)", runtimeName, runtimeVersion, mode, why)

	return api.MustParseEventMask("RunPodSandbox", "CreateContainer", "RemovePodSandbox"), nil
}

// chooseMode: the --mode flag, then the config's mode, then the runtime.
func (p *plugin) chooseMode(runtimeName, runtimeVersion string) (runtimemode.Mode, string) {
	if p.modeOverride != "" && p.modeOverride != config.ModeAuto {
		return runtimemode.Mode(p.modeOverride), "set by --mode"
	}
	if m := p.current.Load().cfg.Mode; m != "" && m != config.ModeAuto {
		return runtimemode.Mode(m), "set by the config's mode"
	}
	return runtimemode.Decide(runtimeName, runtimeVersion)
}

// RunPodSandbox writes the pod's sysctls into its namespaces in namespace
// mode, before any app container exists.
func (p *plugin) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	cur := p.configFor(pod)
	if p.mode() != runtimemode.Namespace {
		// The first container will need the pod's own sysctls: look
		// them up now, while the runtime finishes starting the pod.
		if !cur.policy.Empty() && cur.policy.Excluded(podInfo(pod)) == "" {
			p.pods.Prefetch(ctx, pod.GetId())
		}
		return nil
	}
	d, ok := p.decide(ctx, cur, pod, nil)
	if !ok || len(d.Apply) == 0 {
		return nil
	}
	errs := p.writeNamespaces(namespaceTarget(pod), p.hostSideValues(ctx, pod, d.Apply))
	if len(errs) == 0 {
		p.log.Debugf("pod %s: wrote %s into its namespaces", podName(pod), formatApplied(d.Apply))
		return nil
	}
	err := fmt.Errorf("nri-sysctl: pod %s: cannot set %d sysctl(s) in its namespaces: %w", podName(pod), len(errs), joinWriteErrors(errs))
	if cur.cfg.OnError == config.OnErrorWarn {
		p.log.Warnf("%v (onError: warn, pod starts anyway)", err)
		return nil
	}
	p.log.Error(err)
	return err
}

// hostSideValues rewrites values that name IDs into the host's IDs: in
// namespace mode the plugin writes from the host's user namespace, and the
// kernel reads ping_group_range's GIDs in the writer's namespace.
func (p *plugin) hostSideValues(ctx context.Context, pod *api.PodSandbox, list []sysctl.Sysctl) []sysctl.Sysctl {
	if !podInfo(pod).Own.Has(sysctl.User) {
		return list
	}
	own, _ := p.pods.Get(ctx, pod.GetId())
	out := make([]sysctl.Sysctl, 0, len(list))
	for _, s := range list {
		if s.Key() == "net.ipv4.ping_group_range" {
			host, err := policy.HostPingGroupRange(s.Value(), own.GIDMappings)
			if err != nil {
				p.log.Warnf("pod %s: leaving %s out: %v", podName(pod), s.Key(), err)
				continue
			}
			s = sysctl.New(s.Key(), host)
		}
		out = append(out, s)
	}
	return out
}

// CreateContainer sets the sysctls on the container's spec in spec mode. In
// both modes it annotates what the pod got.
func (p *plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	cur := p.configFor(pod)
	if cur.policy.Empty() {
		return nil, nil, nil
	}
	specMode := p.mode() == runtimemode.Spec
	var existing map[string]string
	if specMode {
		existing = ctr.GetLinux().GetSysctl()
	}
	d, ok := p.decide(ctx, cur, pod, existing)
	if !ok {
		return nil, nil, nil
	}
	p.logDecision(pod, ctr, d)
	if d.Excluded != "" || (len(d.Apply) == 0 && len(d.Skipped) == 0) {
		return nil, nil, nil
	}
	adj := &api.ContainerAdjustment{}
	if specMode {
		for _, s := range d.Apply {
			adj.SetLinuxSysctl(s.Key(), s.Value())
		}
	}
	if len(d.Apply) > 0 {
		adj.AddAnnotation(annotationInjected, formatApplied(d.Apply))
	}
	if len(d.Skipped) > 0 {
		adj.AddAnnotation(annotationSkipped, formatSkipped(d.Skipped))
	}
	return adj, nil, nil
}

// reloadOnSIGHUP re-reads the config file on SIGHUP. A bad file is
// rejected whole and the config in force stays.
func (p *plugin) reloadOnSIGHUP(ctx context.Context, path string) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			p.reload(path)
		}
	}
}

// loadFile checks who could have written the file, then loads it.
func (p *plugin) loadFile(path string) (*config.Config, error) {
	if !p.allowInsecureConfig {
		if err := config.CheckFileSecurity(path); err != nil {
			return nil, err
		}
	}
	return config.Load(path, p.check)
}

func (p *plugin) reload(path string) {
	cfg, err := p.loadFile(path)
	if err != nil {
		p.log.Errorf("reload rejected, keeping the config in force: %v", err)
		return
	}
	if err := p.applyConfig(cfg); err != nil {
		p.log.Errorf("reload rejected, keeping the config in force: %v", err)
		return
	}
	p.log.Infof("reloaded %s: %d default(s), %d rule(s)", path, len(cfg.Sysctls), len(cfg.Rules))
}

// Synchronize reports running containers that lack the plugin's
// annotation: they were created while the plugin was away (fail-open).
// It also forgets pods removed while the plugin was away: their
// RemovePodSandbox never reached it. The runtime sends no event to a
// plugin until its Synchronize has returned, so pods not in the list have
// no event in flight.
func (p *plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	byID := make(map[string]*api.PodSandbox, len(pods))
	for _, pod := range pods {
		byID[pod.GetId()] = pod
	}
	p.forgetPodsNotIn(byID)
	cur := p.current.Load()
	if cur.policy.Empty() {
		return nil, nil
	}
	missing := 0
	for _, c := range ctrs {
		pod := byID[c.GetPodSandboxId()]
		if pod == nil || c.GetState() != api.ContainerState_CONTAINER_RUNNING || cur.policy.Excluded(podInfo(pod)) != "" {
			continue
		}
		// Every decision for a non-excluded pod leaves one of the two.
		_, injected := c.GetAnnotations()[annotationInjected]
		_, skipped := c.GetAnnotations()[annotationSkipped]
		if !injected && !skipped {
			missing++
		}
	}
	if missing > 0 {
		p.log.Warnf("%d running container(s) lack the node's sysctl defaults: they were created while the plugin was not registered", missing)
	}
	return nil, nil
}

// RemovePodSandbox drops the pod's cached sysctls and pinned config.
func (p *plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.pods.Forget(pod.GetId())
	p.pinMu.Lock()
	delete(p.pinned, pod.GetId())
	pinned := len(p.pinned)
	p.pinMu.Unlock()
	// What the plugin keeps per pod, for the churn benchmark (make
	// bench-churn): both must drop to 0 once every pod is removed.
	p.log.Debugf("pod cache: %d pod(s), %d pinned config(s)", p.pods.Len(), pinned)
	return nil
}

// forgetPodsNotIn drops what is kept for pods that no longer exist.
func (p *plugin) forgetPodsNotIn(live map[string]*api.PodSandbox) {
	keep := func(id string) bool { return live[id] != nil }
	p.pods.Retain(keep)
	p.pinMu.Lock()
	for id := range p.pinned {
		if !keep(id) {
			delete(p.pinned, id)
		}
	}
	p.pinMu.Unlock()
}

// decide gathers the inputs for one pod and runs the pure decision. ok is
// false when nothing may be set because the pod's own sysctls are unknown.
func (p *plugin) decide(ctx context.Context, cur *loaded, pod *api.PodSandbox, existing map[string]string) (policy.Decision, bool) {
	in := policy.Input{Pod: podInfo(pod), Existing: existing}
	if why := cur.policy.Excluded(in.Pod); why != "" {
		return policy.Decision{Excluded: why}, true
	}
	own, fresh := p.pods.Get(ctx, pod.GetId())
	if !own.Known() {
		if fresh {
			p.log.Warnf("pod %s: cannot read its own sysctls, so setting none (never override a pod's value): %v", podName(pod), own.Err)
		}
		return policy.Decision{}, false
	}
	if fresh && own.Source != podsysctl.SourceSandboxConfig {
		p.log.Warnf("pod %s: read its sysctls from the %s; runtime-added keys count as the pod's own", podName(pod), own.Source)
	}
	in.PodOwn = own.Own
	in.GIDMappings = own.GIDMappings
	in.Writer = writerFor(p.mode())
	return cur.policy.Decide(in), true
}

// writerFor tells who writes the sysctls in a mode: runc inside the pod in
// spec mode, the plugin as host root in namespace mode.
func writerFor(m runtimemode.Mode) sysctl.Writer {
	if m == runtimemode.Spec {
		return sysctl.WriterInPod
	}
	return sysctl.WriterHost
}

func (p *plugin) logDecision(pod *api.PodSandbox, ctr *api.Container, d policy.Decision) {
	if !p.log.IsLevelEnabled(logrus.DebugLevel) {
		return
	}
	if d.Excluded != "" {
		p.log.Debugf("container %s/%s: pod excluded by %s", podName(pod), ctr.GetName(), d.Excluded)
		return
	}
	p.log.Debugf("container %s/%s: apply [%s] skip [%s]", podName(pod), ctr.GetName(), formatApplied(d.Apply), formatSkipped(d.Skipped))
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
