package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/sirupsen/logrus"
)

type options struct {
	configPath          string
	nriSocket           string
	pluginName          string
	pluginIdx           string
	containerdAddress   string
	containerdNamespace string
	metricsAddress      string
	// Set when the flag was given: it then wins over the config.
	containerdAddressSet   bool
	containerdNamespaceSet bool
	logLevel               string
	logFormat              string
	logFile                string
	mode                   runtimemode.Mode
	skipKernelCheck        bool
	allowInsecureConfig    bool
	watchConfig            time.Duration
	removeTaint            bool
	lastGoodConfig         string
	kubernetesEvents       bool
}

// pluginFlags declares the plugin's own flags: run with no command.
func pluginFlags(fs *flag.FlagSet) func([]string, io.Writer, io.Writer) int {
	o := &options{}
	o.declare(fs)
	return func(_ []string, _, stderr io.Writer) int {
		if err := o.check(fs, stderr); err != nil {
			return 2
		}
		return runPlugin(*o, stderr)
	}
}

// parseRunFlags parses the plugin's flags as run does.
func parseRunFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("nri-sysctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { printUsage(stderr) }
	o.declare(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	return o, o.check(fs, stderr)
}

func (o *options) declare(fs *flag.FlagSet) {
	fs.StringVar(&o.configPath, "config", config.DefaultPath, "config file")
	fs.StringVar(&o.nriSocket, "nri-socket", api.DefaultSocketPath, "NRI socket to connect to")
	fs.StringVar(&o.pluginName, "plugin-name", "sysctl", "plugin name to register with")
	fs.StringVar(&o.pluginIdx, "plugin-idx", "90", "plugin index; a high index sees what lower-index plugins set")
	fs.StringVar(&o.containerdAddress, "containerd-address", defaultContainerdAddress, "containerd gRPC socket, to look up pods' own sysctls")
	fs.StringVar(&o.containerdNamespace, "containerd-namespace", defaultContainerdNamespace, "containerd namespace of the CRI pods")
	fs.StringVar(&o.metricsAddress, "metrics-address", "", "serve /metrics, /healthz and /livez on this host:port, e.g. 127.0.0.1:9465 (default: the config's metricsAddress, else off)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.logFile, "log-file", "", "append log lines to this file (default: stderr; the journal or syslog when containerd starts the plugin, which gives it no stderr)")
	fs.Func("mode", "override the config's mode: auto, spec or namespace", func(s string) (err error) {
		o.mode, err = runtimemode.Parse(s)
		return err
	})
	fs.BoolVar(&o.skipKernelCheck, "skip-kernel-check", false, "do not probe the kernel for the configured keys")
	fs.BoolVar(&o.allowInsecureConfig, "allow-insecure-config", false, "accept a config file that is not owned by root or is writable by group or others")
	fs.DurationVar(&o.watchConfig, "watch-config", 0, "poll the config file this often and reload when its content changes, as on SIGHUP (for a Kubernetes ConfigMap volume; 0: off)")
	fs.BoolVar(&o.removeTaint, "remove-taint", false, "remove the taint "+notReadyTaintKey+":"+notReadyTaintEffect+" from this node (env NODE_NAME) once registered, synchronized and containerd answers pod lookups, through the API server as the pod's service account")
	fs.StringVar(&o.lastGoodConfig, "last-good-config", "", "keep the text of each config put in force in this file (absolute path; written atomically, mode 0600), and start on it when the config file is rejected (default: off, a rejected config file stops the plugin)")
	fs.BoolVar(&o.kubernetesEvents, "kubernetes-events", false, "report rejected configs as Kubernetes Events on this plugin's pod (env POD_NAME, POD_NAMESPACE, POD_UID), through the API server as the pod's service account")
}

// check refuses flag values that parse but make no sense, once parsed.
func (o *options) check(fs *flag.FlagSet, stderr io.Writer) error {
	if err := checkLastGoodConfig(o.lastGoodConfig, o.configPath); err != nil {
		fmt.Fprintln(stderr, err)
		return err
	}
	if o.watchConfig < 0 {
		fmt.Fprintf(stderr, "bad --watch-config %s: want a positive duration, or 0 for off\n", o.watchConfig)
		return fmt.Errorf("bad --watch-config")
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "containerd-address":
			o.containerdAddressSet = true
		case "containerd-namespace":
			o.containerdNamespaceSet = true
		}
	})
	if err := checkMetricsAddress(o.metricsAddress); err != nil {
		fmt.Fprintln(stderr, err)
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return fmt.Errorf("unexpected argument")
	}
	return nil
}

func runPlugin(o options, stderr io.Writer) int {
	// Caught before anything slow: an early SIGHUP must not kill the process.
	hup, stopHUP := notifyOnSIGHUP()
	defer stopHUP()

	log := logrus.New()
	level, err := logrus.ParseLevel(o.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "bad --log-level %q: %v\n", o.logLevel, err)
		return 2
	}
	log.SetLevel(level)
	preinstalled := os.Getenv(api.PluginSocketEnvVar) != ""
	where, closeLog, err := setupLogging(log, stderr, o.logFormat, o.logFile, preinstalled)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	defer closeLog()
	log.WithFields(logrus.Fields{"version": version, "log": where, "preinstalled": preinstalled}).Info("nri-sysctl starting")

	p := newPlugin(log, kernelChecker(o.skipKernelCheck), o.mode)
	p.allowInsecureConfig = o.allowInsecureConfig
	p.metricsListener.flag = o.metricsAddress
	defer p.metricsListener.close()
	p.lastGoodPath = o.lastGoodConfig
	if o.kubernetesEvents {
		events, stopEvents, err := startEvents(log)
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
	conns := newLookups(log, o, parentPID)
	defer conns.Close()
	p.connect = conns.connect
	if err := p.loadInitialConfig(o.configPath, preinstalled); err != nil {
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
	if o.watchConfig > 0 {
		reloads = p.watchConfigFile(ctx, o.configPath, o.watchConfig, hup)
	}
	go p.watchReloads(ctx, o.configPath, reloads)
	if o.removeTaint {
		if err := startTaintRemoval(ctx, log, p.synchronized, readiness{check: p.lookupReady, interval: time.Second}); err != nil {
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

	var stubOpts []stub.Option
	if !preinstalled {
		// A pre-installed plugin gets its name, index and socket from
		// the NRI environment that containerd sets.
		stubOpts = append(stubOpts,
			stub.WithPluginName(o.pluginName),
			stub.WithPluginIdx(o.pluginIdx),
			stub.WithSocketPath(o.nriSocket))
	}
	backoff := newBackoff(500*time.Millisecond, 30*time.Second)
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
			backoff.reset()
		}
		wait := backoff.next()
		log.WithError(err).WithField("retry_in", wait.String()).Warn("NRI connection ended; reconnecting")
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(wait):
		}
	}
}

// serveOnce registers with NRI and serves until the connection ends, or
// until ctx ends and the plugin has left (leave).
func serveOnce(ctx context.Context, p *plugin, opts []stub.Option) (registered bool, err error) {
	s, err := stub.New(p, opts...)
	if err != nil {
		return false, fmt.Errorf("creating NRI stub: %w", err)
	}
	p.setStub(s)
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
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
			p.leave(s)
		case <-stopped:
		}
	}()
	s.Wait()
	return true, errors.New("connection to the runtime closed")
}

// leave closes the NRI connection where the runtime cannot take the close
// for a missing CreateContainer answer (leave.go): new containers are
// refused from now on, those under way answer first, and the close happens
// inside the next pod start or removal.
func (p *plugin) leave(s stub.Stub) {
	timeout := p.requestTimeout()
	if !p.requests.leave(timeout) {
		p.log.WithField("waited", timeout.String()).Warn("stopping: a request is still under way; closing the connection without its answer")
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

// backoff doubles the wait after each failed attempt, up to max.
type backoff struct {
	min, max, cur time.Duration
}

func newBackoff(first, limit time.Duration) *backoff { return &backoff{min: first, max: limit} }

func (b *backoff) reset() { b.cur = 0 }

func (b *backoff) next() time.Duration {
	switch {
	case b.cur == 0:
		b.cur = b.min
	case b.cur < b.max:
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur
}
