// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"fmt"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/kubeapi"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
)

// The containerd the plugin and audit talk to unless told otherwise.
const (
	DefaultContainerdAddress   = "/run/containerd/containerd.sock"
	DefaultContainerdNamespace = "k8s.io"
)

// NotReadyTaint is the taint --remove-taint removes, as key:effect.
const NotReadyTaint = kubeapi.NotReadyTaint

// Options are what the plugin runs with (Run): the command line's flags.
type Options struct {
	// Version is the binary's, for logs and the API server's user agent.
	Version        string
	ConfigPath     string
	NRISocket      string
	PluginName     string
	PluginIdx      string
	Containerd     ContainerdFlags
	MetricsAddress string
	LogLevel       string
	LogFormat      string
	LogFile        string
	// Mode overrides the config's mode when set.
	Mode                runtimemode.Mode
	SkipKernelCheck     bool
	AllowInsecureConfig bool
	WatchConfig         time.Duration
	RemoveTaint         bool
	LastGoodConfig      string
	KubernetesEvents    bool
	// PodStateDir keeps what the plugin set in each running pod across
	// its restarts ("" for memory only).
	PodStateDir string
	// RunningPods overrides the config's runningPods when set.
	RunningPods string
}

// ContainerdFlags name the containerd whose pods are looked up. A flag
// given on the command line wins over the config's containerdAddress /
// containerdNamespace, which win over the defaults.
type ContainerdFlags struct {
	Address, Namespace       string
	AddressSet, NamespaceSet bool
}

// Check refuses values that parse but make no sense together.
func (o Options) Check() error {
	if err := checkLastGoodConfig(o.LastGoodConfig, o.ConfigPath); err != nil {
		return err
	}
	if o.WatchConfig < 0 {
		return fmt.Errorf("bad --watch-config %s: want a positive duration, or 0 for off", o.WatchConfig)
	}
	return checkMetricsAddress(o.MetricsAddress)
}

// userAgent is how the plugin names itself to the API server.
func userAgent(version string) string { return "nri-sysctl/" + version }
