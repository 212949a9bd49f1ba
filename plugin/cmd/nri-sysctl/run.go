// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/podstate"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/nri-sysctl/nri-sysctl/plugin"
)

// pluginFlags declares the plugin's own flags: run with no command.
func pluginFlags(fs *flag.FlagSet) func([]string, io.Writer, io.Writer) int {
	o := &plugin.Options{Version: version}
	declareRunFlags(fs, o)
	return func(_ []string, _, stderr io.Writer) int {
		if err := checkRunFlags(fs, o, stderr); err != nil {
			return 2
		}
		return plugin.Run(*o, stderr)
	}
}

func declareRunFlags(fs *flag.FlagSet, o *plugin.Options) {
	declareConfig(fs, &o.ConfigPath)
	fs.StringVar(&o.NRISocket, "nri-socket", api.DefaultSocketPath, "NRI socket to connect to")
	fs.StringVar(&o.PluginName, "plugin-name", "sysctl", "plugin name to register with")
	fs.StringVar(&o.PluginIdx, "plugin-idx", "90", "plugin index; a high index sees what lower-index plugins set")
	declareContainerdFlags(fs, &o.Containerd)
	fs.StringVar(&o.MetricsAddress, "metrics-address", "", "serve /metrics, /healthz and /livez on this host:port, e.g. 127.0.0.1:9465 (default: the config's metricsAddress, else off)")
	fs.StringVar(&o.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&o.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.LogFile, "log-file", "", "append log lines to this file (default: stderr; the journal or syslog when containerd starts the plugin, which gives it no stderr)")
	fs.Func("mode", "override the config's mode: "+strings.Join(runtimemode.Names(), ", "), func(s string) (err error) {
		o.Mode, err = runtimemode.Parse(s)
		return err
	})
	fs.Func("running-pods", "override the config's runningPods: converge (bring running pods to each config put in force) or keep (only pods created from now on get it)", func(s string) error {
		if s != config.RunningPodsConverge && s != config.RunningPodsKeep {
			return fmt.Errorf("%q is not one of: %s, %s", s, config.RunningPodsConverge, config.RunningPodsKeep)
		}
		o.RunningPods = s
		return nil
	})
	declareSkipKernelCheck(fs, &o.SkipKernelCheck)
	fs.BoolVar(&o.AllowInsecureConfig, "allow-insecure-config", false, "accept a config file that is not owned by root or is writable by group or others")
	fs.DurationVar(&o.WatchConfig, "watch-config", 0, "poll the config file this often and reload when its content changes, as on SIGHUP (for a Kubernetes ConfigMap volume; 0: off)")
	fs.BoolVar(&o.RemoveTaint, "remove-taint", false, "remove the taint "+plugin.NotReadyTaint+" from this node (env NODE_NAME) once registered, synchronized and containerd answers pod lookups, through the API server as the pod's service account")
	fs.StringVar(&o.PodStateDir, "pod-state-dir", podstate.DefaultDir, "keep what the plugin set in each running pod here (root-only; a tmpfs such as /run), so that after a restart its own values are not taken for another writer's; \"\" keeps it in memory only")
	fs.StringVar(&o.LastGoodConfig, "last-good-config", "", "keep the text of each config put in force in this file (absolute path; written atomically, mode 0600), and start on it when the config file is rejected (default: off, a rejected config file stops the plugin)")
	fs.BoolVar(&o.KubernetesEvents, "kubernetes-events", false, "report rejected configs as Kubernetes Events on this plugin's pod (env POD_NAME, POD_NAMESPACE, POD_UID), through the API server as the pod's service account")
}

// checkRunFlags refuses flag values that parse but make no sense, once
// parsed, and notes which containerd flags were given.
func checkRunFlags(fs *flag.FlagSet, o *plugin.Options, stderr io.Writer) error {
	markContainerdFlagsGiven(fs, &o.Containerd)
	if err := o.Check(); err != nil {
		fmt.Fprintln(stderr, err)
		return err
	}
	return nil
}
