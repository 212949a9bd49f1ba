// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/pkg/probe"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/nri-sysctl/nri-sysctl/plugin"
)

// kubeletGIDMapping is what kubelet maps into a pod with hostUsers: false:
// 65536 IDs from container ID 0. explain cannot ask containerd for a pod
// that does not exist, so it assumes this one.
var kubeletGIDMapping = []policy.IDMapping{{ContainerID: 0, HostID: 0, Size: 65536}}

// explainFlags declares explain's flags; it prints what a pod with the
// given attributes would get, key by key, from the same compiled policy
// and decision the plugin uses.
func explainFlags(fs *flag.FlagSet) func([]string, io.Writer, io.Writer) int {
	var path string
	declareConfig(fs, &path)
	namespace := fs.String("namespace", "", "the pod's namespace (required)")
	name := fs.String("name", "", "the pod's name")
	labels := keyValues{}
	fs.Var(labels, "label", "a pod label `K=V` (repeat for more)")
	annotations := keyValues{}
	fs.Var(annotations, "annotation", "a pod annotation `K=V` (repeat for more), such as "+config.ProfilesAnnotation+"=a,b")
	handler := fs.String("runtime-handler", "", "the pod's runtime handler (RuntimeClass handler)")
	hostNetwork := fs.Bool("host-network", false, "hostNetwork: true (the pod also shares the host's UTS namespace)")
	hostIPC := fs.Bool("host-ipc", false, "hostIPC: true")
	hostUTS := fs.Bool("host-uts", false, "the pod shares the host's UTS namespace")
	hostUsers := fs.Bool("host-users", true, "false: hostUsers: false, the pod's own user namespace with kubelet's 65536 GIDs from 0")
	own := keyValues{}
	fs.Var(own, "pod-sysctl", "a sysctl the pod sets itself (securityContext.sysctls) `K=V` (repeat for more)")
	var skip bool
	declareSkipKernelCheck(fs, &skip)
	mode := runtimemode.Spec
	fs.Func("mode", "the mode the node's runtime gets, spec (containerd >= 2.3) or namespace: who writes the sysctls, which matters to user-namespace pods (default spec)", func(v string) (err error) {
		mode, err = runtimemode.Parse(v)
		if err == nil && mode == runtimemode.Auto {
			err = fmt.Errorf("explain needs spec or namespace: it has no runtime to ask")
		}
		return err
	})
	return func(_ []string, stdout, stderr io.Writer) int {
		if *namespace == "" {
			fmt.Fprintln(stderr, "explain needs --namespace")
			fs.Usage()
			return 2
		}
		cfg, err := config.Load(path, probe.KernelCheck(skip))
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		var refused policy.UserNamespaceRefusals
		if !skip && !*hostUsers {
			refused = probeUserNamespaceRefusals(cfg, stderr)
		}
		in := policy.Input{
			Pod: policy.Pod{
				Namespace:      *namespace,
				Name:           *name,
				Labels:         labels,
				Annotations:    annotations,
				RuntimeHandler: *handler,
				Own: ownedUnless(map[sysctl.Namespace]bool{
					sysctl.Net:  *hostNetwork,
					sysctl.IPC:  *hostIPC,
					sysctl.UTS:  *hostNetwork || *hostUTS,
					sysctl.User: *hostUsers,
				}),
			},
			PodOwn: sysctl.NormalizeKeys(own),
			Writer: mode.Writer(),
		}
		if in.Pod.Own.Has(sysctl.User) {
			in.GIDMappings = kubeletGIDMapping
		}
		for _, line := range policy.Explain(cfg, refused, in) {
			fmt.Fprintln(stdout, line)
		}
		fmt.Fprintln(stdout, runningPodsLine(cfg))
		return 0
	}
}

// runningPodsLine says what a running pod with these attributes gets.
func runningPodsLine(cfg *config.Config) string {
	if cfg.RunningPods == config.RunningPodsKeep {
		return "running pods: keep what they got when created (runningPods: keep)"
	}
	return "running pods: a running pod like this one gets the same at the next convergence, but for keys another writer changed (runningPods: converge)"
}

// probeUserNamespace is swapped in tests.
var probeUserNamespace plugin.UserNamespaceProbe = probe.UserNamespace

// probeUserNamespaceRefusals finds, as the plugin does at start-up, the
// keys the kernel refuses in a user namespace: they are left out for
// user-namespace pods.
func probeUserNamespaceRefusals(cfg *config.Config, stderr io.Writer) policy.UserNamespaceRefusals {
	res, err := plugin.CheckUserNamespace(cfg, probeUserNamespace)
	var problems config.Problems
	switch {
	case errors.As(err, &problems):
		fmt.Fprintf(stderr, "warning: the plugin would refuse this config: %v\n", problems)
	case err != nil:
		fmt.Fprintf(stderr, "warning: cannot tell which sysctls user-namespace pods may set: %v\n", err)
		return nil
	}
	return policy.RefusalsOf(res.Refused)
}

// keyValues collects repeated K=V flags.
type keyValues map[string]string

func (kv keyValues) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		parts = append(parts, k+"="+kv[k])
	}
	return strings.Join(parts, ",")
}

func (kv keyValues) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not K=V", s)
	}
	kv[k] = v
	return nil
}

// ownedUnless is the set of namespaces a pod has to itself: each kind
// unless it shares the host's.
func ownedUnless(sharesHosts map[sysctl.Namespace]bool) policy.NamespaceSet {
	var own policy.NamespaceSet
	for ns, shared := range sharesHosts {
		if !shared {
			own = own.With(ns)
		}
	}
	return own
}
