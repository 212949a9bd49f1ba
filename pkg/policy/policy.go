// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package policy decides which sysctls a container gets. It is pure: plain
// inputs in, a decision out, no I/O.
package policy

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// Pod is what the decision needs to know about a pod.
type Pod struct {
	Namespace string
	Name      string
	Labels    map[string]string
	// Annotations are the pod's; ProfilesAnnotation among them asks for
	// profiles.
	Annotations    map[string]string
	RuntimeHandler string
	// Own lists the namespaces the pod has to itself, from the pod
	// sandbox's namespace list (never the container's: for a hostNetwork
	// pod a container still names the pause process's, i.e. the host's,
	// network namespace).
	Own NamespaceSet
}

// NamespaceSet holds which namespaces a pod owns, one bit per
// sysctl.Namespace.
type NamespaceSet uint8

// Owning is the set of the given namespaces.
func Owning(namespaces ...sysctl.Namespace) NamespaceSet {
	var s NamespaceSet
	for _, ns := range namespaces {
		s = s.With(ns)
	}
	return s
}

// With adds ns to the set; NotNamespaced is never a member.
func (s NamespaceSet) With(ns sysctl.Namespace) NamespaceSet {
	if ns == sysctl.NotNamespaced {
		return s
	}
	return s | 1<<ns
}

// Has tells whether the set owns namespace ns.
func (s NamespaceSet) Has(ns sysctl.Namespace) bool {
	return ns != sysctl.NotNamespaced && s&(1<<ns) != 0
}

// Input is one container's decision input.
type Input struct {
	Pod Pod
	// PodOwn holds the pod's own sysctls (securityContext.sysctls),
	// normalized. They win over every default.
	PodOwn map[string]string
	// Existing holds the sysctls already on the container as the plugin
	// sees it: set by the runtime or a lower-index plugin.
	Existing map[string]string
	// GIDMappings is the pod's user namespace gid mapping, if it has one.
	GIDMappings []IDMapping
	// Writer is who will write the sysctls: in a user-namespace pod the
	// kernel refuses different keys to each.
	Writer sysctl.Writer
}

// Skipped is a key the config wanted but the container does not get.
type Skipped struct {
	Key   string
	Value string
	Code  SkipCode
	// Reason is the code's text with this case's detail.
	Reason string
}

// Decision is what one container gets.
type Decision struct {
	// Excluded is the exclusion criterion that matched, or "".
	Excluded string
	Apply    []sysctl.Sysctl
	Skipped  []Skipped
	// ProfilesAsked are the profiles the pod asked for, in the
	// annotation's order, each name once. What became of each is in
	// Skipped alone (Profiles reads it from there).
	ProfilesAsked []string
}

// Profiles is what became of each profile the pod asked for, in the
// annotation's order: applied, unless Skipped holds it.
func (d Decision) Profiles() []ProfileResult {
	if len(d.ProfilesAsked) == 0 {
		return nil
	}
	out := make([]ProfileResult, len(d.ProfilesAsked))
	for i, name := range d.ProfilesAsked {
		out[i] = ProfileResult{Name: name, Result: ProfileApplied}
		for _, s := range d.Skipped {
			if s.Code.Profile() && strings.HasPrefix(s.Key, ProfileKeyPrefix) && s.Key[len(ProfileKeyPrefix):] == name {
				out[i].Result, out[i].Reason = s.Code.ProfileOutcome(), s.Reason
				break
			}
		}
	}
	return out
}

// ProfilesRefused says why no profile was taken from an annotation over a
// bound (askedProfiles), or "": the pod still gets defaults and rules.
func (d Decision) ProfilesRefused() string {
	for _, s := range d.Skipped {
		if s.Code == SkipProfilesRefused {
			return s.Reason
		}
	}
	return ""
}

// ProfileResult is what became of one profile a pod asked for.
type ProfileResult struct {
	Name   string
	Result ProfileOutcome
	// Reason says why it was not applied (the text of its Skipped).
	Reason string
}

// ProfileOutcome is the result label of nri_sysctl_profiles_total.
type ProfileOutcome string

// The results: given, left out by its allow lists, or not in the config;
// refused counts a whole annotation over a bound (Decision.ProfilesRefused).
// Each but applied is the skip code's (skipCodes).
const (
	ProfileApplied    ProfileOutcome = "applied"
	ProfileNotAllowed ProfileOutcome = "not_allowed"
	ProfileUnknown    ProfileOutcome = "unknown"
	ProfileRefused    ProfileOutcome = "refused"
)

// ProfileOutcomes lists every result, for metrics that show each at 0.
var ProfileOutcomes = []ProfileOutcome{ProfileApplied, ProfileNotAllowed, ProfileUnknown, ProfileRefused}

// ProfileKeyPrefix starts the Skipped.Key of a profile that was not
// applied: "profile/low-latency".
const ProfileKeyPrefix = "profile/"

// Policy is a config compiled for fast decisions: keys are numbered once, so
// a decision works on a slice instead of building maps.
type Policy struct {
	keys []string
	ns   []sysctl.Namespace
	// refusedInUserNS marks, for each writer, the keys to leave out for
	// user-namespace pods.
	refusedInUserNS map[sysctl.Writer][]bool
	base            []string
	rules           []rule
	profiles        map[string]*profile
	exclude         selector
}

type profile struct {
	allowedNamespaces      []string
	allowedRuntimeHandlers []string
	set                    []indexedValue
}

type rule struct {
	name  string
	match selector
	set   []indexedValue
}

// selector is a config.Selector with labels as a sorted slice: ranging
// over a slice is much cheaper than over a map on the hot path.
type selector struct {
	namespaces      []string
	runtimeHandlers []string
	labels          []labelPair
	annotations     []labelPair
}

type labelPair struct{ key, value string }

func compileSelector(s config.Selector) selector {
	return selector{namespaces: s.Namespaces, runtimeHandlers: s.RuntimeHandlers,
		labels: sortedPairs(s.Labels), annotations: sortedPairs(s.Annotations)}
}

func sortedPairs(m map[string]string) []labelPair {
	var out []labelPair
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, labelPair{k, m[k]})
	}
	return out
}

type indexedValue struct {
	idx   int
	value string
}

// UserNamespaceRefusals holds, for each writer, the keys the kernel
// refuses it in a pod with its own user namespace: what the user namespace
// probe found (probe.UserNamespace) for a config, beside it, never in it.
type UserNamespaceRefusals map[sysctl.Writer]map[string]bool

// RefusalsOf is the set of refused keys in a probe's result, which gives
// each its reason.
func RefusalsOf(reasons map[sysctl.Writer]map[string]error) UserNamespaceRefusals {
	out := UserNamespaceRefusals{}
	for w, keys := range reasons {
		out[w] = map[string]bool{}
		for k := range keys {
			out[w][k] = true
		}
	}
	return out
}

// Compile prepares a validated config for Decide, with the keys to leave
// out for user-namespace pods (nil when the probe did not run).
func Compile(cfg *config.Config, refused UserNamespaceRefusals) *Policy {
	p := &Policy{keys: cfg.AllKeys(), exclude: compileSelector(cfg.Exclude)}
	index := make(map[string]int, len(p.keys))
	p.ns = make([]sysctl.Namespace, len(p.keys))
	for i, k := range p.keys {
		index[k] = i
		p.ns[i] = sysctl.NamespaceOf(k)
	}
	// userNamespaceRefused: fail keeps the keys, so that such pods fail
	// and someone notices.
	if cfg.UserNamespaceRefused != config.RefusedFail {
		p.refusedInUserNS = make(map[sysctl.Writer][]bool, len(refused))
		for w, refused := range refused {
			marks := make([]bool, len(p.keys))
			for i, k := range p.keys {
				marks[i] = refused[k]
			}
			p.refusedInUserNS[w] = marks
		}
	}
	p.base = make([]string, len(p.keys))
	for _, e := range cfg.Sysctls {
		p.base[index[e.Key]] = e.Value
	}
	for _, r := range cfg.Rules {
		cr := rule{name: r.Name, match: compileSelector(r.Match)}
		for _, e := range r.Sysctls {
			cr.set = append(cr.set, indexedValue{idx: index[e.Key], value: e.Value})
		}
		p.rules = append(p.rules, cr)
	}
	p.profiles = make(map[string]*profile, len(cfg.Profiles))
	for _, pr := range cfg.Profiles {
		cp := &profile{allowedNamespaces: pr.AllowedNamespaces, allowedRuntimeHandlers: pr.AllowedRuntimeHandlers}
		for _, e := range pr.Sysctls {
			cp.set = append(cp.set, indexedValue{idx: index[e.Key], value: e.Value})
		}
		p.profiles[pr.Name] = cp
	}
	return p
}

// Empty tells whether the policy sets nothing at all.
func (p *Policy) Empty() bool { return len(p.keys) == 0 }

// Decide works out a container's sysctls. Every container of a pod gets the
// same answer for the same inputs.
func (p *Policy) Decide(in Input) Decision {
	if why := excludedBy(p.exclude, in.Pod); why != "" {
		return Decision{Excluded: why}
	}
	values, n := p.effectiveValues(in.Pod)
	var d Decision
	// Only a pod that asks pays for profiles: one map lookup otherwise.
	if asked, ok := in.Pod.Annotations[config.ProfilesAnnotation]; ok {
		n += p.applyProfiles(asked, in.Pod, values, &d)
	}
	d.Apply = make([]sysctl.Sysctl, 0, n)
	refused := p.refusedInUserNS[in.Writer]
	for i, value := range values {
		if value == "" {
			continue
		}
		key := p.keys[i]
		if skip, skipped := skipReason(key, p.ns[i], refused != nil && refused[i], in); skipped {
			skip.Value = value
			d.Skipped = append(d.Skipped, skip)
			continue
		}
		if key == sysctl.PingGroupRange && in.Pod.Own.Has(sysctl.User) {
			clamped, ok, reason := clampPingGroupRange(value, in.GIDMappings)
			if !ok {
				skip := SkipUserNamespace.Skip(key, ": "+reason)
				skip.Value = value
				d.Skipped = append(d.Skipped, skip)
				continue
			}
			value = clamped
		}
		d.Apply = append(d.Apply, sysctl.New(key, value))
	}
	return d
}

// effectiveValues starts from the node defaults and applies matching rules
// in order, a later rule overriding an earlier one key by key.
// n counts the keys that have a value.
func (p *Policy) effectiveValues(pod Pod) (values []string, n int) {
	values = make([]string, len(p.base))
	copy(values, p.base)
	for _, r := range p.rules {
		if !matches(r.match, pod) {
			continue
		}
		for _, s := range r.set {
			values[s.idx] = s.value
		}
	}
	for _, v := range values {
		if v != "" {
			n++
		}
	}
	return values, n
}

// Bounds on what the profiles annotation, which any pod author writes, may
// cost a decision: past either, the pod gets its defaults and rules without
// profiles. 16 names of the longest kind a config allows (63 characters)
// and their commas fit in 1 KiB.
const (
	MaxProfilesAnnotationBytes = 1024
	MaxProfilesAsked           = 16
)

// applyProfiles layers the profiles the pod asked for over values, in the
// annotation's order, and records in d the names asked and, for a profile
// not applied, its Skipped (which the container's annotation shows). It returns
// how many keys got a value they did not have. Its work is bounded by
// MaxProfilesAnnotationBytes whatever the pod carries.
func (p *Policy) applyProfiles(asked string, pod Pod, values []string, d *Decision) (added int) {
	names, refusal := askedProfiles(asked)
	if refusal != "" {
		d.Skipped = append(d.Skipped, SkipProfilesRefused.Skip(config.ProfilesAnnotation, refusal))
		return 0
	}
	d.ProfilesAsked = names
	for _, name := range names {
		pr, known := p.profiles[name]
		var skip *Skipped
		switch {
		case !known:
			skip = ptr(SkipProfileUnknown.Skip(ProfileKeyPrefix+name, ""))
		case len(pr.allowedNamespaces) > 0 && !anyGlob(pr.allowedNamespaces, pod.Namespace):
			skip = ptr(SkipProfileNotAllowed.Skip(ProfileKeyPrefix+name, " in namespace "+pod.Namespace))
		case len(pr.allowedRuntimeHandlers) > 0 && !anyGlob(pr.allowedRuntimeHandlers, pod.RuntimeHandler):
			skip = ptr(SkipProfileNotAllowed.Skip(ProfileKeyPrefix+name, " for runtime handler "+quoteEmpty(pod.RuntimeHandler)))
		}
		if skip != nil {
			d.Skipped = append(d.Skipped, *skip)
			continue
		}
		for _, s := range pr.set {
			if values[s.idx] == "" {
				added++
			}
			values[s.idx] = s.value
		}
	}
	return added
}

// askedProfiles splits the annotation into its names, each once, in order,
// in time linear in its length; refusal says why none is taken (the detail
// of a SkipProfilesRefused): the annotation is over a bound, or names a
// profile no config can have.
func askedProfiles(asked string) (names []string, refusal string) {
	if len(asked) > MaxProfilesAnnotationBytes {
		return nil, fmt.Sprintf(" is %d bytes long, over the %d allowed", len(asked), MaxProfilesAnnotationBytes)
	}
	seen := make(map[string]bool, MaxProfilesAsked)
	for rest := asked; rest != ""; {
		var name string
		name, rest, _ = strings.Cut(rest, ",")
		name = strings.TrimSpace(name)
		if name == "" || seen[name] {
			continue
		}
		if !config.ValidProfileName(name) {
			return nil, fmt.Sprintf(" names %q, which is no profile name", shortened(name))
		}
		if len(names) == MaxProfilesAsked {
			return nil, fmt.Sprintf(" names more than %d profiles", MaxProfilesAsked)
		}
		seen[name] = true
		names = append(names, name)
	}
	return names, ""
}

// shortened keeps a name from the pod short enough for a message.
func shortened(name string) string {
	const most = 64
	if len(name) <= most {
		return name
	}
	return name[:most] + "..."
}

// quoteEmpty names the default runtime handler, which CRI gives as "".
func quoteEmpty(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

// skipReason applies, in order: host namespaces, keys the kernel refuses
// in the pod's user namespace, the pod's own value, and a value already on
// the container.
func skipReason(key string, ns sysctl.Namespace, refusedInUserNS bool, in Input) (skip Skipped, skipped bool) {
	if !in.Pod.Own.Has(ns) {
		return SkipHostNamespace.Skip(key, " ("+ns.String()+")"), true
	}
	if refusedInUserNS && in.Pod.Own.Has(sysctl.User) {
		// Which writer was refused: runc in the pod (spec mode) and host
		// root (namespace mode) are refused different keys.
		return SkipUserNamespace.Skip(key, ": the kernel refuses it when "+in.Writer.String()+" writes it"), true
	}
	if _, own := in.PodOwn[key]; own {
		return SkipPodOwn.Skip(key, ""), true
	}
	if _, set := in.Existing[key]; set {
		return SkipExisting.Skip(key, ""), true
	}
	return Skipped{}, false
}

func ptr[T any](v T) *T { return &v }

// matches is true when every field the selector gives matches the pod.
func matches(s selector, pod Pod) bool {
	if len(s.namespaces) > 0 && !anyGlob(s.namespaces, pod.Namespace) {
		return false
	}
	if len(s.runtimeHandlers) > 0 && !anyGlob(s.runtimeHandlers, pod.RuntimeHandler) {
		return false
	}
	for _, l := range s.labels {
		if got, ok := pod.Labels[l.key]; !ok || got != l.value {
			return false
		}
	}
	for _, a := range s.annotations {
		if got, ok := pod.Annotations[a.key]; !ok || got != a.value {
			return false
		}
	}
	return true
}

// excludedBy returns the first exclusion criterion the pod meets: any one
// namespace, runtime handler, label or annotation pair excludes it.
func excludedBy(s selector, pod Pod) string {
	for _, g := range s.namespaces {
		if glob(g, pod.Namespace) {
			return "namespace " + g
		}
	}
	for _, g := range s.runtimeHandlers {
		if glob(g, pod.RuntimeHandler) {
			return "runtime handler " + g
		}
	}
	for _, l := range s.labels {
		if got, ok := pod.Labels[l.key]; ok && got == l.value {
			return "label " + l.key + "=" + got
		}
	}
	for _, a := range s.annotations {
		if got, ok := pod.Annotations[a.key]; ok && got == a.value {
			return "annotation " + a.key + "=" + got
		}
	}
	return ""
}

func anyGlob(globs []string, s string) bool {
	for _, g := range globs {
		if glob(g, s) {
			return true
		}
	}
	return false
}

// glob matches with path.Match; patterns were checked when the config loaded.
func glob(pattern, s string) bool {
	ok, _ := path.Match(pattern, s)
	return ok
}

// Excluded returns the exclusion criterion the pod meets, or "". It lets
// callers skip the pod lookup for excluded pods.
func (p *Policy) Excluded(pod Pod) string { return excludedBy(p.exclude, pod) }

// MatchedRules names the rules that match the pod, in the order Decide
// applies them (a later one overrides an earlier one key by key). It says
// nothing of exclusion: an excluded pod gets nothing whatever matches.
func (p *Policy) MatchedRules(pod Pod) []string {
	var names []string
	for _, r := range p.rules {
		if matches(r.match, pod) {
			names = append(names, r.name)
		}
	}
	return names
}
