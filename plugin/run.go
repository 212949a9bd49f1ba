// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/nri-sysctl/nri-sysctl/pkg/backoff"
	"github.com/nri-sysctl/nri-sysctl/pkg/kubeapi"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/probe"
	"github.com/sirupsen/logrus"
)

// Run runs the plugin with o until SIGINT or SIGTERM, and returns its exit
// code: 0 when stopped by a signal, 1 when it refuses to start or its
// pre-installed connection ends, 2 for a bad log setting.
func Run(o Options, stderr io.Writer) int {
	// Caught before anything slow: an early SIGHUP must not kill the process.
	hup, stopHUP := notifyOnSIGHUP()
	defer stopHUP()

	log := logrus.New()
	level, err := logrus.ParseLevel(o.LogLevel)
	if err != nil {
		fmt.Fprintf(stderr, "bad --log-level %q: %v\n", o.LogLevel, err)
		return 2
	}
	log.SetLevel(level)
	preinstalled := os.Getenv(api.PluginSocketEnvVar) != ""
	where, closeLog, err := setupLogging(log, stderr, o.LogFormat, o.LogFile, preinstalled)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	defer closeLog()
	log.WithFields(logrus.Fields{"version": o.Version, "log": where, "preinstalled": preinstalled}).Info("nri-sysctl starting")

	p := newPlugin(log, probe.KernelCheck(o.SkipKernelCheck), o.Mode)
	p.allowInsecureConfig = o.AllowInsecureConfig
	p.metricsListener.flag = o.MetricsAddress
	defer p.metricsListener.close()
	p.lastGoodPath = o.LastGoodConfig
	if o.KubernetesEvents {
		events, stopEvents, err := kubeapi.StartEvents(log, userAgent(o.Version))
		if err != nil {
			log.WithError(err).Error("refusing to start")
			return 1
		}
		defer stopEvents()
		p.events = events
	}
	parentPID := 0
	if preinstalled {
		parentPID = os.Getppid()
	}
	pool := podsysctl.NewPool(log, parentPID)
	defer pool.Close()
	p.connect = connectWith(pool, o.Containerd)
	rejected, err := p.loadInitialConfig(o.ConfigPath, preinstalled)
	if err != nil {
		log.WithError(err).Error("refusing to start")
		return 1
	}
	if p.current.Load().cfg.Source == "" {
		// No file (pre-installed, waiting for Configure): still look
		// pods up, through the default or discovered containerd.
		if err := p.applyConfig(p.current.Load().cfg); err != nil {
			log.WithError(err).Error("refusing to start")
			return 1
		}
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	reloads := hup
	if o.WatchConfig > 0 {
		reloads = p.watchConfigFile(ctx, o.ConfigPath, o.WatchConfig, hup, rejected)
	}
	go p.watchReloads(ctx, o.ConfigPath, reloads)
	p.openPodState(o.PodStateDir)
	p.runningPodsOverride = o.RunningPods
	go p.convergeRunningPods(ctx)
	if o.RemoveTaint {
		if err := kubeapi.StartTaintRemoval(ctx, log, userAgent(o.Version), p.synchronized, kubeapi.Readiness{Check: p.lookupReady, Interval: time.Second}); err != nil {
			log.WithError(err).Error("refusing to start")
			return 1
		}
	}
	go func() {
		select {
		case <-p.synchronized:
			notifyReady(log)
		case <-ctx.Done():
		}
	}()

	// The sweeper a stopping plugin registers (leave.go) takes the
	// plugin's name and index, pre-installed from containerd's
	// environment, on the NRI socket.
	p.sweepSocket, p.sweepName, p.sweepIdx = o.NRISocket, o.PluginName, o.PluginIdx
	if preinstalled {
		p.sweepName, p.sweepIdx = os.Getenv(api.PluginNameEnvVar), os.Getenv(api.PluginIdxEnvVar)
	}
	var stubOpts []stub.Option
	if !preinstalled {
		// A pre-installed plugin gets its name, index and socket from
		// the NRI environment that containerd sets.
		stubOpts = append(stubOpts,
			stub.WithPluginName(o.PluginName),
			stub.WithPluginIdx(o.PluginIdx),
			stub.WithSocketPath(o.NRISocket),
			stub.WithDialer(dialNRI))
	}
	retry := backoff.New(500*time.Millisecond, 30*time.Second)
	for {
		registered, err := serveOnce(ctx, p, stubOpts)
		if ctx.Err() != nil {
			return 0
		}
		if preinstalled {
			// containerd relaunches its pre-installed plugins when it
			// restarts; the inherited socket cannot be redialled.
			log.WithError(err).Error("NRI connection ended")
			return 1
		}
		if registered {
			retry.Reset()
		}
		wait := retry.Next()
		log.WithError(err).WithField("retry_in", wait.String()).Warn("NRI connection ended; reconnecting")
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(wait):
		}
	}
}

// nriDialTimeout bounds dialling the NRI socket.
const nriDialTimeout = 10 * time.Second

// dialNRI dials the NRI socket as the containerd socket is dialled
// (podsysctl.TrustedDial): its peer hands the plugin the pids and
// namespace paths it writes into. A pre-installed plugin's socket is the
// one containerd passed it, and needs no dial.
func dialNRI(path string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), nriDialTimeout)
	defer cancel()
	return podsysctl.TrustedDial(ctx, "NRI", path, 0)
}

// serveOnce registers with NRI and serves until the connection ends, or
// until ctx ends and the plugin has left (leave).
func serveOnce(ctx context.Context, p *plugin, opts []stub.Option) (registered bool, err error) {
	failurePolicy := &api.FailurePolicy{}
	s, err := stub.New(p, append(slices.Clip(opts), stub.WithFailurePolicy(failurePolicy))...)
	if err != nil {
		return false, fmt.Errorf("creating NRI stub: %w", err)
	}
	p.setStub(s, failurePolicy)
	// Configure marked the plugin registered (metrics.go); read the meter
	// when the connection ends: Configure may have just started metrics.
	defer func() { p.meter.Load().connected(false) }()
	// The stub serves each request within the context it was started
	// with: ctx would cancel the requests under way at SIGTERM, and they
	// would answer "nothing" (their lookups cancelled) before the plugin
	// leaves. They are ended by the connection's close instead.
	if err := s.Start(context.WithoutCancel(ctx)); err != nil {
		return false, fmt.Errorf("registering with NRI: %w", err)
	}
	p.log.WithField("mode", p.mode()).Info("registered with NRI")
	// A stopping plugin returns only once it has left: its sweeper
	// outlives the connection it closes (leave.go).
	stopped, left := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(left)
		select {
		case <-ctx.Done():
			p.leave(s)
		case <-stopped:
		}
	}()
	s.Wait()
	close(stopped)
	<-left
	return true, errors.New("connection to the runtime closed")
}

// leave closes the NRI connection where the runtime cannot take the close
// for a missing CreateContainer answer (leave.go): new containers are
// refused from now on, those under way answer first, and the close happens
// inside a sweeper's registration, else inside the next pod start or
// removal.
func (p *plugin) leave(s stub.Stub) {
	timeout := p.requestTimeout()
	if !p.requests.leave(timeout) {
		p.log.WithField("waited", timeout.String()).Warn("stopping: a request is still under way; closing the connection without its answer")
	}
	if p.sweepSocket != "" {
		err := sweep(p.sweepSocket, p.sweepName, p.sweepIdx, s.Stop, 2*timeout)
		if err == nil {
			p.log.Info("stopping: closed the NRI connection while the runtime registered a sweeper, so it drops the plugin before it creates another container")
			return
		}
		p.log.WithError(err).Warn("stopping: could not register a sweeper; closing inside the next pod event instead")
	}
	if closed, ok := p.requests.takeCloseOffer(p.leaveWait); ok {
		s.Stop()
		close(closed)
		p.log.Info("stopping: closed the NRI connection inside a pod event, so the runtime drops the plugin before it creates another container")
		return
	}
	p.log.WithField("waited", p.leaveWait.String()).Warn("stopping: no pod started or was removed meanwhile; closing between requests, so a container created before the runtime's next pod event may start without the node's sysctl defaults (NRI asks a closed plugin once more)")
	p.requests.quiet(answerLinger, timeout)
	s.Stop()
}

// notifyReady tells systemd (Type=notify) that the plugin is registered and
// synchronized: the runtime sends it pod events from then on, so units
// ordered after it start only once pods will get their defaults.
func notifyReady(log *logrus.Logger) {
	sent, err := daemon.SdNotify(false, daemon.SdNotifyReady)
	switch {
	case err != nil:
		log.WithError(err).Warn("sd_notify READY=1 failed")
	case sent:
		log.Debug("sent READY=1 to systemd")
	}
}
