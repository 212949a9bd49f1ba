// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package kubeletexport turns a validated nri-sysctl config into a
// KubeletConfiguration drop-in for kubelet's --config-dir: the config's
// node-wide defaults as kubelet's defaultPodSysctls (Kubernetes 1.37,
// alpha, feature gate DefaultPodSysctls), and, as YAML comments with the
// reason, everything of the config that kubelet cannot express. It is
// pure: a config and what the node's probes found in, text out.
package kubeletexport

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// Input is what the export needs.
type Input struct {
	// Config is validated, with inheritFromHost expanded against the host.
	Config *config.Config
	// UserNamespaceProbed tells whether the user namespace probe ran.
	UserNamespaceProbed bool
	// UserNamespaceRefused holds the keys the kernel refuses to runc
	// inside a pod with its own user namespace, each with its reason: the
	// probe's finding for sysctl.WriterInPod. runc writes kubelet's
	// defaults, as it writes the plugin's in spec mode.
	UserNamespaceRefused map[string]error
}

// kubeletNamespaced is what kubelet v1.37.2 knows to be namespaced, the
// names its defaultPodSysctls takes (pkg/kubelet/apis/config/validation,
// from k8s.io/component-helpers/node/util/sysctl): any other name stops
// kubelet at start with "is not known to be namespaced". The plugin's
// kernel.shm and kernel.msg prefixes are wider (kernel.shm_next_id).
var kubeletNamespaced = struct {
	exact    []string
	prefixes []string
}{
	exact: []string{"kernel.domainname", "kernel.sem",
		"kernel.shmall", "kernel.shmmax", "kernel.shmmni", "kernel.shm_rmid_forced",
		"kernel.msgmax", "kernel.msgmnb", "kernel.msgmni"},
	prefixes: []string{"net.", "fs.mqueue.", "user."},
}

// kubeletMaxNameLen is the longest name kubelet's validation takes.
const kubeletMaxNameLen = 253

// kubeletRefuses says why kubelet would not start with, or could not be
// given, e among its defaultPodSysctls, or "".
func kubeletRefuses(e config.Entry) string {
	key := e.Key
	if !utf8.ValidString(e.Value) {
		// The config goes through JSON, which has no bytes, only text.
		return "the value is not valid UTF-8, which kubelet's config cannot carry"
	}
	if len(key) > kubeletMaxNameLen {
		return fmt.Sprintf("longer than the %d characters kubelet takes", kubeletMaxNameLen)
	}
	if slices.Contains(kubeletNamespaced.exact, key) {
		return ""
	}
	for _, p := range kubeletNamespaced.prefixes {
		if strings.HasPrefix(key, p) {
			return ""
		}
	}
	return "kubelet does not know it to be namespaced and would not start (\"is not known to be namespaced for defaultPodSysctls\")"
}

// Fragment is the drop-in. It refuses a config whose inheritFromHost was
// not expanded: without the host's values the fragment would not give the
// pods what the plugin gives them.
func Fragment(in Input) (string, error) {
	cfg := in.Config
	if len(cfg.InheritFromHost) > 0 && !cfg.InheritExpanded {
		return "", fmt.Errorf("%s: inheritFromHost needs the kernel probe to read the host's values; run export-kubelet without --skip-kernel-check, on the node whose values you want", cfg.Source)
	}
	var b strings.Builder
	header(&b, cfg)
	defaults := slices.SortedFunc(slices.Values(cfg.Sysctls), func(a, b config.Entry) int { return strings.Compare(a.Key, b.Key) })
	var refused []config.Entry
	var exported []config.Entry
	for _, e := range defaults {
		if kubeletRefuses(e) != "" {
			refused = append(refused, e)
			continue
		}
		exported = append(exported, e)
	}
	b.WriteString("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfeatureGates:\n  DefaultPodSysctls: true\n")
	if len(exported) == 0 {
		b.WriteString("# The config has no node-wide default kubelet can take.\ndefaultPodSysctls: {}\n")
	} else {
		b.WriteString("defaultPodSysctls:\n")
	}
	for _, e := range exported {
		for _, note := range entryNotes(in, e) {
			comment(&b, "  #", "  #", note)
		}
		fmt.Fprintf(&b, "  %s: %s\n", e.Key, strconv.Quote(e.Value))
	}
	lost := lostSections(in, exported, refused)
	if len(lost) > 0 {
		b.WriteString("\n# What kubelet cannot express. The plugin does these; kubelet with this\n# fragment alone will not.\n")
	}
	for _, s := range lost {
		b.WriteString("#\n")
		comment(&b, "#", "#", s.title)
		for _, item := range s.items {
			comment(&b, "#  -", "#   ", item)
		}
	}
	return b.String(), nil
}

func header(b *strings.Builder, cfg *config.Config) {
	sum := cfg.ShortHash()
	for _, p := range []string{
		fmt.Sprintf("KubeletConfiguration drop-in for kubelet's --config-dir, made by `nri-sysctl export-kubelet` from %s (sha256 %s...): the plugin's node-wide defaults as kubelet's defaultPodSysctls (Kubernetes 1.37, alpha, feature gate DefaultPodSysctls).", strconv.Quote(cfg.Source), sum),
		"kubelet reads only *.conf files there, in lexical order, each merged over --config (featureGates and defaultPodSysctls merge key by key).",
		"kubelet puts these into every pod's sandbox config as if the pod had asked for them. As under the plugin, the pod's own securityContext.sysctls win key by key, and a pod never gets a key of a namespace it shares with the host: net.* and kernel.domainname are left out of hostNetwork pods, the IPC keys out of hostIPC pods, user.* out of pods in the host's user namespace.",
		"kubelet checks only a pod's own sysctls against allowedUnsafeSysctls, never these: a key outside Kubernetes' safe set needs no allowlist entry here.",
		"With the plugin also running, kubelet's value wins for every key listed here: the plugin defers to the pod's own sysctls, and kubelet's defaults arrive as those.",
	} {
		comment(b, "#", "#", p)
		b.WriteString("#\n")
	}
}

// entryNotes are the comments above one exported default: where its value
// came from and what happens to it that the plugin would do otherwise.
func entryNotes(in Input, e config.Entry) []string {
	var notes []string
	if e.Source == config.SourceHost {
		notes = append(notes, fmt.Sprintf("Inherited from the host (inheritFromHost %s, line %d): the host's value when this was exported, frozen here. The plugin reads the host's value again at every start and reload; kubelet keeps this one until you export again.", strconv.Quote(e.Pattern), e.Line))
	}
	if e.Written != "" {
		notes = append(notes, fmt.Sprintf("Written %s in the config; the kernel keeps it as %s, which pods get under both.", strconv.Quote(e.Written), strconv.Quote(e.Value)))
	}
	if why, bad := in.UserNamespaceRefused[e.Key]; bad {
		plugin := "The plugin leaves it out for them (userNamespaceRefused: skip) and they start"
		if in.Config.UserNamespaceRefused == config.RefusedFail {
			plugin = "The plugin keeps it too (userNamespaceRefused: fail), so they fail under both"
		}
		notes = append(notes, fmt.Sprintf("hostUsers: false pods: the kernel refuses this key inside a pod's own user namespace (%v). kubelet sets it anyway, and such pods fail to start. %s.", why, plugin))
	}
	if e.Key == sysctl.PingGroupRange {
		notes = append(notes, "hostUsers: false pods: the plugin narrows this range to the GIDs mapped in the pod's user namespace; kubelet passes it as it is, and the kernel takes only mapped GIDs.")
	}
	if sysctl.ProbeName(e.Key) != e.Key {
		notes = append(notes, "Names a network interface: kubelet's value is written when the pod's sandbox starts, so a pod gets it only if the interface is in its network namespace by then; the plugin writes it for each container, after the sandbox (not compared on a node here).")
	}
	return notes
}

// section is one kind of thing the fragment leaves out, with its items.
type section struct {
	title string
	items []string
}

// lostSections lists, in a fixed order, what the config does that kubelet
// cannot: each present in the config, with the reason.
func lostSections(in Input, exported, refused []config.Entry) []section {
	cfg := in.Config
	defaults := map[string]bool{}
	for _, e := range exported {
		defaults[e.Key] = true
	}
	// shadowed says which of a layer's keys kubelet's defaults would
	// override with both running.
	shadowed := func(entries []config.Entry) string {
		var keys []string
		for _, e := range entries {
			if defaults[e.Key] {
				keys = append(keys, e.Key)
			}
		}
		if len(keys) == 0 {
			return ""
		}
		return " With both running, kubelet's default wins for " + strings.Join(keys, ", ") + "."
	}
	var out []section
	if len(refused) > 0 {
		s := section{title: "Defaults left out, which kubelet would refuse:"}
		for _, e := range refused {
			s.items = append(s.items, fmt.Sprintf("%s: %s: %s.", e.Key, strconv.Quote(e.Value), kubeletRefuses(e)))
		}
		out = append(out, s)
	}
	if len(cfg.Rules) > 0 {
		s := section{title: "rules: kubelet has one set of defaults for every pod; it cannot select pods by namespace, label, annotation or runtime handler. Under kubelet the pods these match get only the defaults above. The plugin applies them in this order, above the defaults and below the pod's own sysctls:"}
		for _, r := range cfg.Rules {
			s.items = append(s.items, fmt.Sprintf("%s (line %d): %s sets %s.%s", strconv.Quote(r.Name), r.Line, describeSelector("match", r.Match), describeEntries(r.Sysctls), shadowed(r.Sysctls)))
		}
		out = append(out, s)
	}
	if ex := describeSelector("", cfg.Exclude); ex != "" {
		out = append(out, section{
			title: "exclude: kubelet cannot leave a pod out. Under kubelet these pods get every default above, with both running too; under the plugin a pod that matches any one of these gets nothing:",
			items: []string{ex + "."},
		})
	}
	if len(cfg.Profiles) > 0 {
		s := section{title: "profiles: kubelet has nothing a pod asks for by annotation (" + config.ProfilesAnnotation + "). A pod can set these keys itself in securityContext.sysctls; outside Kubernetes' safe set only where allowedUnsafeSysctls lists them, which is node-wide, for every pod, with no namespace bound:"}
		for _, p := range cfg.Profiles {
			bounds := []string{}
			if len(p.AllowedNamespaces) > 0 {
				bounds = append(bounds, "allowedNamespaces "+quoteList(p.AllowedNamespaces))
			}
			if len(p.AllowedRuntimeHandlers) > 0 {
				bounds = append(bounds, "allowedRuntimeHandlers "+quoteList(p.AllowedRuntimeHandlers))
			}
			bound := "allowed in every namespace"
			if len(bounds) > 0 {
				bound = strings.Join(bounds, ", ")
			}
			s.items = append(s.items, fmt.Sprintf("%s (line %d, %s): %s.%s", strconv.Quote(p.Name), p.Line, bound, describeEntries(p.Sysctls), shadowed(p.Sysctls)))
		}
		out = append(out, s)
	}
	if !in.UserNamespaceProbed && len(cfg.Sysctls) > 0 {
		out = append(out, section{title: "hostUsers: false pods: the user namespace probe did not run (--skip-kernel-check, or it failed), so which of the defaults above such a pod cannot be given is not known here. The plugin leaves those out for such pods; kubelet sets every default, and a pod fails to start where the kernel refuses one (kernel.domainname on the kernels checked, docs/kubelet-comparison.md). Export on the node, without --skip-kernel-check, to have them named."})
	}
	return out
}

// describeSelector is a selector in words, "" when it selects nothing.
func describeSelector(prefix string, s config.Selector) string {
	var parts []string
	if len(s.Namespaces) > 0 {
		parts = append(parts, "namespaces "+quoteList(s.Namespaces))
	}
	if len(s.Labels) > 0 {
		parts = append(parts, "labels "+quoteMap(s.Labels))
	}
	if len(s.Annotations) > 0 {
		parts = append(parts, "annotations "+quoteMap(s.Annotations))
	}
	if len(s.RuntimeHandlers) > 0 {
		parts = append(parts, "runtimeHandlers "+quoteList(s.RuntimeHandlers))
	}
	switch {
	case len(parts) == 0 && prefix != "":
		return prefix + " every pod,"
	case len(parts) == 0:
		return ""
	case prefix != "":
		return prefix + " " + strings.Join(parts, ", ") + ","
	}
	return strings.Join(parts, "; ")
}

func describeEntries(entries []config.Entry) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		parts[i] = e.Key + "=" + strconv.Quote(e.Value)
	}
	return strings.Join(parts, ", ")
}

// quoteList and quoteMap quote what the config's author wrote, so that no
// text of theirs can end a comment line.
func quoteList(items []string) string {
	parts := make([]string, len(items))
	for i, s := range items {
		parts[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func quoteMap(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, strconv.Quote(k)+"="+strconv.Quote(m[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// commentWidth is where comment lines wrap.
const commentWidth = 78

// comment writes text as comment lines wrapped at commentWidth: the first
// starts with first, the others with cont.
func comment(b *strings.Builder, first, cont, text string) {
	line, empty := first, true
	for _, w := range strings.Fields(text) {
		if !empty && len(line)+1+len(w) > commentWidth {
			b.WriteString(line + "\n")
			line = cont
		}
		line += " " + w
		empty = false
	}
	b.WriteString(line + "\n")
}
