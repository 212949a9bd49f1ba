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
		for _, line := range explain(cfg, refused, in) {
			fmt.Fprintln(stdout, line)
		}
		return 0
	}
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

// explain is the report: one line per configured key (sorted, the order
// the decision walks them), then the rules that matched in the order they
// apply, then the profiles the pod asked for, then the exclusion.
func explain(cfg *config.Config, refused policy.UserNamespaceRefusals, in policy.Input) []string {
	pol := policy.Compile(cfg, refused)
	d := pol.Decide(in)
	var lines []string
	for _, key := range cfg.AllKeys() {
		switch i, j := slices.IndexFunc(d.Apply, func(s sysctl.Sysctl) bool { return s.Key() == key }),
			slices.IndexFunc(d.Skipped, func(s policy.Skipped) bool { return s.Key == key }); {
		case i >= 0:
			lines = append(lines, fmt.Sprintf("%s %s applied", key, d.Apply[i].Value()))
		case j >= 0:
			lines = append(lines, fmt.Sprintf("%s %s skipped (%s)", key, d.Skipped[j].Value, d.Skipped[j].Reason))
		case d.Excluded != "":
			lines = append(lines, fmt.Sprintf("%s - skipped (pod excluded: %s)", key, d.Excluded))
		default:
			lines = append(lines, fmt.Sprintf("%s - not set (no default and no matching rule)", key))
		}
	}
	switch rules := pol.MatchedRules(in.Pod); {
	case d.Excluded != "":
		lines = append(lines, "rules: not applied (the pod is excluded)")
	case len(rules) == 0:
		lines = append(lines, "rules: none match")
	default:
		lines = append(lines, "rules: "+strings.Join(rules, ", ")+" (in this order; a later rule overrides an earlier one)")
	}
	lines = append(lines, explainProfiles(d, in.Pod))
	if d.Excluded != "" {
		lines = append(lines, "excluded: yes, by "+d.Excluded)
	} else {
		lines = append(lines, "excluded: no")
	}
	return lines
}

// explainProfiles says what became of each profile the pod asked for, in
// the order they apply, with the reason as the skipped annotation gives it.
func explainProfiles(d policy.Decision, pod policy.Pod) string {
	_, asked := pod.Annotations[config.ProfilesAnnotation]
	switch {
	case !asked:
		return "profiles: none asked for (" + config.ProfilesAnnotation + ")"
	case d.Excluded != "":
		return "profiles: not applied (the pod is excluded)"
	case d.ProfilesRefused != "":
		return "profiles: refused (" + d.ProfilesRefused + "); the pod gets the defaults and rules without profiles"
	case len(d.Profiles) == 0:
		return "profiles: none asked for (" + config.ProfilesAnnotation + " names none)"
	}
	parts := make([]string, len(d.Profiles))
	for i, r := range d.Profiles {
		parts[i] = r.Name + " applied"
		if r.Result != policy.ProfileApplied {
			parts[i] = r.Name + " skipped (" + r.Reason + ")"
		}
	}
	return "profiles: " + strings.Join(parts, ", ") + " (in this order; a later profile overrides an earlier one)"
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
