// Command nri-sysctl is a containerd NRI plugin that gives every pod the
// node's default namespaced sysctls.
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
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/probe"
	"github.com/sirupsen/logrus"
)

// version is set by the Makefile.
var version = "dev"

const usage = `nri-sysctl: give every pod the node's default namespaced sysctls (containerd NRI plugin)

Usage:
  nri-sysctl [flags]                                  run the plugin
  nri-sysctl validate --config PATH [--skip-kernel-check]
                                                      check a config; exit 0 if valid, 1 with every problem
  nri-sysctl version                                  print the version

Run flags:
`

type options struct {
	configPath          string
	nriSocket           string
	pluginName          string
	pluginIdx           string
	containerdAddress   string
	containerdNamespace string
	// Set when the flag was given: it then wins over the config.
	containerdAddressSet   bool
	containerdNamespaceSet bool
	logLevel               string
	mode                   string
	skipKernelCheck        bool
	allowInsecureConfig    bool
}

func main() {
	// The user namespace probe re-executes this binary as its helper.
	if probe.IsHelper(os.Args) {
		os.Exit(probe.RunHelper(os.Args))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "version":
			fmt.Fprintf(stdout, "nri-sysctl %s\n", version)
			return 0
		case "validate":
			return runValidate(args[1:], stdout, stderr)
		}
	}
	opts, err := parseRunFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	return runPlugin(opts, stderr)
}

func parseRunFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("nri-sysctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.configPath, "config", config.DefaultPath, "config file")
	fs.StringVar(&o.nriSocket, "nri-socket", api.DefaultSocketPath, "NRI socket to connect to")
	fs.StringVar(&o.pluginName, "plugin-name", "sysctl", "plugin name to register with")
	fs.StringVar(&o.pluginIdx, "plugin-idx", "90", "plugin index; a high index sees what lower-index plugins set")
	fs.StringVar(&o.containerdAddress, "containerd-address", "/run/containerd/containerd.sock", "containerd gRPC socket, to look up pods' own sysctls")
	fs.StringVar(&o.containerdNamespace, "containerd-namespace", "k8s.io", "containerd namespace of the CRI pods")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&o.mode, "mode", "", "override the config's mode: auto, spec or namespace")
	fs.BoolVar(&o.skipKernelCheck, "skip-kernel-check", false, "do not probe the kernel for the configured keys")
	fs.BoolVar(&o.allowInsecureConfig, "allow-insecure-config", false, "accept a config file that is not owned by root or is writable by group or others")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "containerd-address":
			o.containerdAddressSet = true
		case "containerd-namespace":
			o.containerdNamespaceSet = true
		}
	})
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return o, fmt.Errorf("unexpected argument")
	}
	return o, nil
}

func runValidate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("nri-sysctl validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", config.DefaultPath, "config file to check")
	skip := fs.Bool("skip-kernel-check", false, "leave out the probe of this kernel (for image builds on another kernel)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := config.Load(*path, kernelChecker(*skip))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: valid (%d default(s), %d rule(s))\n", *path, len(cfg.Sysctls), len(cfg.Rules))
	return 0
}

func kernelChecker(skip bool) config.KernelChecker {
	if skip {
		return nil
	}
	return probe.Kernel
}

func runPlugin(o options, stderr io.Writer) int {
	log := logrus.New()
	log.SetOutput(stderr)
	level, err := logrus.ParseLevel(o.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "bad --log-level %q: %v\n", o.logLevel, err)
		return 2
	}
	log.SetLevel(level)

	preinstalled := os.Getenv(api.PluginSocketEnvVar) != ""
	p := newPlugin(log, kernelChecker(o.skipKernelCheck), o.mode)
	p.allowInsecureConfig = o.allowInsecureConfig
	// The containerd connection follows the config in force: a
	// pre-installed plugin may get its config (and so its containerd
	// socket) only in Configure.
	fetcher := &switchingFetcher{log: log}
	defer fetcher.Close()
	p.pods = podsysctl.NewCache(fetcher)
	p.retarget = func(cfg *config.Config) error { return fetcher.use(resolveContainerd(o, cfg)) }
	if err := p.loadInitialConfig(o.configPath, preinstalled); err != nil {
		log.Errorf("refusing to start: %v", err)
		return 1
	}
	if err := p.retarget(p.current.Load().cfg); err != nil {
		log.Errorf("refusing to start: %v", err)
		return 1
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	go p.reloadOnSIGHUP(ctx, o.configPath)

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
			log.Errorf("NRI connection ended: %v", err)
			return 1
		}
		if registered {
			backoff.reset()
		}
		wait := backoff.next()
		log.Warnf("NRI connection ended (%v); reconnecting in %s", err, wait)
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(wait):
		}
	}
}

// serveOnce registers with NRI and serves until the connection ends.
func serveOnce(ctx context.Context, p *plugin, opts []stub.Option) (registered bool, err error) {
	s, err := stub.New(p, opts...)
	if err != nil {
		return false, fmt.Errorf("creating NRI stub: %w", err)
	}
	if err := s.Start(ctx); err != nil {
		return false, fmt.Errorf("registering with NRI: %w", err)
	}
	p.log.Infof("registered with NRI (mode %s)", p.mode())
	notifyReady(p.log)
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
			s.Stop()
		case <-stopped:
		}
	}()
	s.Wait()
	return true, errors.New("connection to the runtime closed")
}

// notifyReady tells systemd (Type=notify) that the plugin is registered,
// so units ordered after it start only once pods will get their defaults.
func notifyReady(log *logrus.Logger) {
	sent, err := daemon.SdNotify(false, daemon.SdNotifyReady)
	switch {
	case err != nil:
		log.Warnf("sd_notify READY=1: %v", err)
	case sent:
		log.Debug("sent READY=1 to systemd")
	}
}

// backoff doubles the wait after each failed attempt, up to max.
type backoff struct {
	min, max, cur time.Duration
}

func newBackoff(min, max time.Duration) *backoff { return &backoff{min: min, max: max} }

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
