// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package config reads and validates the nri-sysctl configuration file.
// A file is accepted whole or rejected whole, with every problem listed.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"gopkg.in/yaml.v3"
)

// DefaultPath is where the plugin looks for its config.
const DefaultPath = "/etc/nri-sysctl/config.yaml"

// Entry is one sysctl from the file, with a normalized key.
type Entry struct {
	Key   string
	Value string
	// Line is the line of the key, or of the inheritFromHost entry that
	// brought a host value.
	Line int
	// Source is SourceHost for a value read from the host by
	// inheritFromHost, and empty for a value the file sets.
	Source string
	// Pattern is the inheritFromHost entry that brought a host value.
	Pattern string
	// Written is the value as the file wrote it, set when the kernel
	// keeps it in another form (Value), such as 1001 ms rounded to
	// 1004 to fit jiffies.
	Written string
}

// SourceHost marks an Entry whose value was read from the host.
const SourceHost = "host"

// Selector picks pods. In a rule every given field must match (AND); within
// a list any item may match (OR). Globs use path.Match syntax.
type Selector struct {
	Namespaces []string
	Labels     map[string]string
	// Annotations match pod annotations exactly as Labels match labels.
	Annotations     map[string]string
	RuntimeHandlers []string
}

// ProfilesAnnotation is the pod annotation that asks for profiles by name,
// comma-separated, applied in that order.
const ProfilesAnnotation = "nri-sysctl.io/profiles"

// Profile is a set of sysctls a pod asks for by ProfilesAnnotation. Each
// allow list that is given bounds where it applies (both must match); an
// absent or empty one bounds nothing.
type Profile struct {
	Name                   string
	AllowedNamespaces      []string
	AllowedRuntimeHandlers []string
	Sysctls                []Entry
	Line                   int
}

// Rule adds or overrides sysctls for the pods it matches.
type Rule struct {
	Name    string
	Match   Selector
	Sysctls []Entry
	Line    int
}

// Config is a validated configuration.
type Config struct {
	Source  string
	Sysctls []Entry
	Rules   []Rule
	// Profiles are in file order, names unique.
	Profiles []Profile
	// Exclude lists pods that get nothing: a pod is excluded when any one
	// of its criteria matches.
	Exclude Selector
	// Mode is how sysctls reach pods; runtimemode.Auto leaves it to the
	// runtime.
	Mode    runtimemode.Mode
	OnError string
	// OnLookupError says what a container gets when its pod cannot be
	// looked up, or decided for, within the runtime's deadline:
	// OnLookupErrorSkip (the default) or OnLookupErrorFail.
	OnLookupError string
	// OnMissedDeadline is the failure policy the plugin declares to the
	// runtime when it registers (NRI >= v0.12.4 honours it): proceed
	// (OnMissedDeadlineProceed, the default: a request the plugin did not
	// answer in time goes on without it, and the runtime drops the
	// plugin) or refuse (OnMissedDeadlineRefuse: the request fails and
	// the plugin stays registered).
	OnMissedDeadline string
	// RunningPods says whether pods already running are brought to each
	// config put in force (RunningPodsConverge, the default) or keep what
	// they were created with (RunningPodsKeep).
	RunningPods string
	// ContainerdAddress and ContainerdNamespace, when set, say where to
	// look pods up (the --containerd-address and --containerd-namespace
	// defaults). A pre-installed plugin gets no flags, so its config is
	// the only place to name a containerd socket other than the default.
	ContainerdAddress   string
	ContainerdNamespace string
	// MetricsAddress, when set, is the host:port the plugin serves
	// /metrics and /healthz on (the --metrics-address default).
	MetricsAddress string
	// TextSHA256 is the hex SHA-256 of the text the config was parsed
	// from, so that metrics can tell which config is in force.
	TextSHA256 string
	// UserNamespaceRefused says what happens to a key the kernel will not
	// let a user-namespace pod set: skip it (the default) or keep it, so
	// that the pod fails and the operator hears of it.
	UserNamespaceRefused string
	// InheritFromHost lists the inheritFromHost entries in file order.
	// The host values they bring are in Sysctls, with Source SourceHost.
	InheritFromHost []Inheritance
	// InheritExpanded tells whether InheritFromHost was expanded against
	// the host. Parse expands it only with a KernelChecker: without the
	// probe there is no telling which host keys a pod can be given.
	InheritExpanded bool
}

// Inheritance is one inheritFromHost entry.
type Inheritance struct {
	// Pattern is a normalized name or glob.
	Pattern string
	Line    int
	// Index is its place in the inheritFromHost list.
	Index int
	// Keys lists the keys it matched that a pod can be given, sorted,
	// including keys that an explicit value in sysctls overrides.
	Keys []string
	// LeftOut counts the namespaced keys it matched that a pod cannot be
	// given (see docs/configuration.md), such as keys a fresh pod namespace lacks.
	LeftOut int
}

// Inherited returns the entries whose values come from the host.
func (c *Config) Inherited() []Entry {
	var out []Entry
	for _, e := range c.Sysctls {
		if e.Source == SourceHost {
			out = append(out, e)
		}
	}
	return out
}

// Error policies (see docs/configuration.md).
const (
	OnErrorFail = "fail"
	OnErrorWarn = "warn"
	// OnLookupErrorSkip starts a container the plugin could not look its
	// pod up for, or decide for in time, without the defaults; fail
	// refuses it, so that the kubelet retries it.
	OnLookupErrorSkip = "skip"
	OnLookupErrorFail = "fail"

	// OnMissedDeadlineProceed is NRI's own behaviour: a request the plugin
	// missed the deadline of proceeds without it, and the plugin is
	// dropped. OnMissedDeadlineRefuse declares fail_request and
	// keep_connected.
	OnMissedDeadlineProceed = "proceed"
	OnMissedDeadlineRefuse  = "refuse"

	// RunningPodsConverge writes each config put in force into the
	// namespaces of the pods already running; RunningPodsKeep leaves them
	// as they were created.
	RunningPodsConverge = "converge"
	RunningPodsKeep     = "keep"
	RefusedSkip         = "skip"
	RefusedFail         = "fail"
)

// KeptInAnotherForm lists the entries, defaults, rules then profiles, whose value
// the kernel keeps in a form of its own: pods get, and annotations show,
// that form.
func (c *Config) KeptInAnotherForm() []Entry {
	var out []Entry
	for _, e := range c.Sysctls {
		if e.Written != "" {
			out = append(out, e)
		}
	}
	for _, r := range c.Rules {
		for _, e := range r.Sysctls {
			if e.Written != "" {
				out = append(out, e)
			}
		}
	}
	for _, pr := range c.Profiles {
		for _, e := range pr.Sysctls {
			if e.Written != "" {
				out = append(out, e)
			}
		}
	}
	return out
}

// AllKeys lists every sysctl the config can set, sorted and unique.
func (c *Config) AllKeys() []string {
	seen := map[string]bool{}
	for _, e := range c.Sysctls {
		seen[e.Key] = true
	}
	for _, r := range c.Rules {
		for _, e := range r.Sysctls {
			seen[e.Key] = true
		}
	}
	for _, pr := range c.Profiles {
		for _, e := range pr.Sysctls {
			seen[e.Key] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// Warnings are what validate points out in a config it accepts: each key
// outside Kubernetes' safe set in a profile with no allowedNamespaces. Any
// pod author on the node can ask for such a profile, in any namespace.
func (c *Config) Warnings() []Problem {
	var out []Problem
	for _, pr := range c.Profiles {
		if len(pr.AllowedNamespaces) > 0 {
			continue
		}
		for _, e := range pr.Sysctls {
			if !sysctl.KubernetesSafe(e.Key) {
				out = append(out, Problem{File: c.Source, Line: e.Line, Key: "profiles." + pr.Name + ".sysctls." + e.Key,
					Reason: "not in Kubernetes' safe set, and the profile has no allowedNamespaces: a pod in any namespace can ask for it"})
			}
		}
	}
	return out
}

// Problem is one reason a config was rejected.
type Problem struct {
	File   string
	Line   int
	Key    string
	Reason string
}

func (p Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	if p.Key != "" {
		fmt.Fprintf(&b, ": %s", p.Key)
	}
	b.WriteString(": ")
	b.WriteString(p.Reason)
	return b.String()
}

// Problems is every reason a config was rejected, in file order.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.Error()
	}
	return fmt.Sprintf("invalid config (%d problem(s)):\n  %s", len(ps), strings.Join(lines, "\n  "))
}

// KernelChecker asks the kernel about every normalized name and each value
// it may be given: which names cannot be set in a pod at all (refused), and
// what the kernel stored for each value of the others (stored, judged by
// sysctl.Judge). probe.Kernel is the real one.
type KernelChecker func(values map[string][]string) (refused map[string]error, stored map[string]map[string]sysctl.Stored, err error)

// ShortHash is the first 12 hex digits of TextSHA256: how the metrics,
// the Events and the kubelet export name a config's text.
func (c *Config) ShortHash() string { return ShortHash(c.TextSHA256) }

// ShortHash cuts a hex SHA-256 to its first 12 digits.
func ShortHash(sum string) string { return sum[:min(12, len(sum))] }

// TextSHA256 is the hex SHA-256 of a config's text (Config.TextSHA256).
func TextSHA256(text []byte) string {
	sum := sha256.Sum256(text)
	return hex.EncodeToString(sum[:])
}

// Parse validates config text; source names it in messages.
func Parse(source string, data []byte, check KernelChecker) (*Config, error) {
	p := &parser{file: source, cfg: &Config{Source: source, Mode: runtimemode.Auto, OnError: OnErrorFail, OnLookupError: OnLookupErrorSkip, OnMissedDeadline: OnMissedDeadlineProceed, RunningPods: RunningPodsConverge, UserNamespaceRefused: RefusedSkip}}
	p.cfg.TextSHA256 = TextSHA256(data)
	parsed := p.parse(data)
	// Probe even when other problems were found, so that one run lists
	// every problem.
	if parsed && check != nil {
		p.checkKernel(check)
	}
	if len(p.problems) > 0 {
		sort.SliceStable(p.problems, func(i, j int) bool { return p.problems[i].Line < p.problems[j].Line })
		return nil, p.problems
	}
	return p.cfg, nil
}

type parser struct {
	file     string
	cfg      *Config
	problems Problems
}

func (p *parser) fail(line int, key, format string, args ...any) {
	p.problems = append(p.problems, Problem{File: p.file, Line: line, Key: key, Reason: fmt.Sprintf(format, args...)})
}

// parse reports whether the text was YAML the rest of the checks can use.
func (p *parser) parse(data []byte) bool {
	if len(bytes.TrimSpace(data)) == 0 {
		// An empty file is a valid no-op config: a node image may ship
		// the plugin before anyone decides on values.
		return true
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		// Only comments: as empty.
		return true
	} else if err != nil {
		p.yamlError(err)
		return false
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.fail(extra.Line, "", "more than one YAML document; put everything in one")
		return false
	} else if !errors.Is(err, io.EOF) {
		// Text after the first document that is not even YAML.
		p.yamlError(err)
		return false
	}
	if len(doc.Content) == 0 {
		return true
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return true
	}
	p.eachField(root, "", map[string]func(*yaml.Node, *yaml.Node){
		"sysctls":         func(k, v *yaml.Node) { p.cfg.Sysctls = p.sysctlMap(v, "sysctls") },
		"inheritFromHost": func(k, v *yaml.Node) { p.cfg.InheritFromHost = p.inheritList(v) },
		"rules":           func(k, v *yaml.Node) { p.rules(v) },
		"profiles":        func(k, v *yaml.Node) { p.profiles(v) },
		"exclude":         func(k, v *yaml.Node) { p.cfg.Exclude = p.selector(v, "exclude") },
		"mode": func(k, v *yaml.Node) {
			p.cfg.Mode = runtimemode.Mode(p.oneOf(v, "mode", runtimemode.Names()...))
		},
		"onError": func(k, v *yaml.Node) {
			p.cfg.OnError = p.oneOf(v, "onError", OnErrorFail, OnErrorWarn)
		},
		"onLookupError": func(k, v *yaml.Node) {
			p.cfg.OnLookupError = p.oneOf(v, "onLookupError", OnLookupErrorSkip, OnLookupErrorFail)
		},
		"onMissedDeadline": func(k, v *yaml.Node) {
			p.cfg.OnMissedDeadline = p.oneOf(v, "onMissedDeadline", OnMissedDeadlineProceed, OnMissedDeadlineRefuse)
		},
		"runningPods": func(k, v *yaml.Node) {
			p.cfg.RunningPods = p.oneOf(v, "runningPods", RunningPodsConverge, RunningPodsKeep)
		},
		"userNamespaceRefused": func(k, v *yaml.Node) {
			p.cfg.UserNamespaceRefused = p.oneOf(v, "userNamespaceRefused", RefusedSkip, RefusedFail)
		},
		"containerdAddress": func(k, v *yaml.Node) {
			p.cfg.ContainerdAddress = p.socketPath(v, "containerdAddress")
		},
		"containerdNamespace": func(k, v *yaml.Node) {
			p.cfg.ContainerdNamespace = p.containerdNamespace(v, "containerdNamespace")
		},
		"metricsAddress": func(k, v *yaml.Node) {
			p.cfg.MetricsAddress = p.hostPort(v, "metricsAddress")
		},
	})
	return true
}

func (p *parser) yamlError(err error) {
	p.fail(yamlErrorLine(err), "", "not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
}

// eachField walks a mapping, refusing unknown and duplicate fields.
func (p *parser) eachField(n *yaml.Node, where string, fields map[string]func(k, v *yaml.Node)) {
	if !p.isKind(n, yaml.MappingNode, where, "a mapping") {
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := join(where, k.Value)
		if first, dup := seen[k.Value]; dup {
			p.fail(k.Line, name, "duplicate field (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		handle, ok := fields[k.Value]
		if !ok {
			p.fail(k.Line, name, "unknown field; known fields here: %s", knownFields(fields))
			continue
		}
		handle(k, v)
	}
}

func knownFields(fields map[string]func(k, v *yaml.Node)) string {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func join(where, name string) string {
	if where == "" {
		return name
	}
	return where + "." + name
}

func (p *parser) isKind(n *yaml.Node, kind yaml.Kind, where, want string) bool {
	if n.Kind == kind {
		return true
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" && kind != yaml.ScalarNode {
		// "sysctls:" with nothing after it means empty.
		return false
	}
	p.fail(n.Line, where, "must be %s, got %s", want, describe(n))
	return false
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return fmt.Sprintf("%q", n.Value)
}

// sysctlMap reads a key: value mapping of sysctls, normalizing each key and
// refusing keys that clash once normalized.
func (p *parser) sysctlMap(n *yaml.Node, where string) []Entry {
	if !p.isKind(n, yaml.MappingNode, where, "a mapping of sysctl: value") {
		return nil
	}
	var entries []Entry
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			p.fail(k.Line, where, "sysctl name must be a plain string, got %s", describe(k))
			continue
		}
		key := sysctl.Normalize(k.Value)
		label := join(where, k.Value)
		if first, dup := seen[key]; dup {
			if first.Value == k.Value {
				p.fail(k.Line, label, "duplicate key (first at line %d)", first.Line)
			} else {
				p.fail(k.Line, label, "same sysctl as %q at line %d, written in another form", first.Value, first.Line)
			}
			continue
		}
		seen[key] = k
		value, ok := p.scalarValue(v, label)
		if !ok {
			continue
		}
		if err := p.checkSysctl(k.Line, label, key, value); err {
			continue
		}
		entries = append(entries, Entry{Key: key, Value: value, Line: k.Line})
	}
	return entries
}

// scalarValue accepts YAML strings and numbers (and booleans, which some
// sysctls read as 0/1 only when written as numbers: refuse them).
func (p *parser) scalarValue(v *yaml.Node, label string) (string, bool) {
	if v.Kind != yaml.ScalarNode {
		p.fail(v.Line, label, "value must be a number or a string, got %s", describe(v))
		return "", false
	}
	switch v.Tag {
	case "!!str", "!!int", "!!float":
		return v.Value, true
	case "!!null":
		p.fail(v.Line, label, "empty value")
	case "!!bool":
		p.fail(v.Line, label, "value %q is a YAML boolean; write 0 or 1", v.Value)
	default:
		p.fail(v.Line, label, "value must be a number or a string, got %s (%s)", v.Value, v.Tag)
	}
	return "", false
}

// checkSysctl returns true when it found a problem.
func (p *parser) checkSysctl(line int, label, key, value string) bool {
	bad := false
	if err := sysctl.ValidateName(key); err != nil {
		p.fail(line, label, "%v", err)
		return true
	}
	if err := sysctl.ValidateNamespaced(key); err != nil {
		p.fail(line, label, "%v", err)
		bad = true
	}
	if err := sysctl.ValidateValue(value); err != nil {
		p.fail(line, label, "%v", err)
		bad = true
	}
	return bad
}

func (p *parser) rules(n *yaml.Node) {
	if !p.isKind(n, yaml.SequenceNode, "rules", "a list of rules") {
		return
	}
	names := map[string]int{}
	for i, item := range n.Content {
		where := fmt.Sprintf("rules[%d]", i)
		if item.Kind == yaml.ScalarNode && item.Tag == "!!null" {
			p.fail(item.Line, where, "empty rule")
			continue
		}
		r := Rule{Line: item.Line}
		hasSysctls := false
		p.eachField(item, where, map[string]func(k, v *yaml.Node){
			"name":  func(k, v *yaml.Node) { r.Name = p.str(v, where+".name") },
			"match": func(k, v *yaml.Node) { r.Match = p.selector(v, where+".match") },
			"sysctls": func(k, v *yaml.Node) {
				hasSysctls = true
				r.Sysctls = p.sysctlMap(v, where+".sysctls")
			},
		})
		if item.Kind != yaml.MappingNode {
			continue
		}
		if r.Name == "" {
			r.Name = where
		} else if first, dup := names[r.Name]; dup {
			p.fail(item.Line, where+".name", "rule name %q already used at line %d", r.Name, first)
		} else {
			names[r.Name] = item.Line
		}
		if !hasSysctls {
			p.fail(item.Line, where, "rule has no sysctls")
		}
		p.cfg.Rules = append(p.cfg.Rules, r)
	}
}

func (p *parser) selector(n *yaml.Node, where string) Selector {
	var s Selector
	p.eachField(n, where, map[string]func(k, v *yaml.Node){
		"namespaces":      func(k, v *yaml.Node) { s.Namespaces = p.globs(v, where+".namespaces") },
		"runtimeHandlers": func(k, v *yaml.Node) { s.RuntimeHandlers = p.globs(v, where+".runtimeHandlers") },
		"labels":          func(k, v *yaml.Node) { s.Labels = p.labels(v, where+".labels", "label") },
		"annotations":     func(k, v *yaml.Node) { s.Annotations = p.labels(v, where+".annotations", "annotation") },
	})
	return s
}

// profileNameRE keeps names a comma-separated annotation can carry: no
// commas, no spaces, nothing that reads as a path.
var profileNameRE = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// ValidProfileName tells whether a config could name a profile so: a pod
// asking for any other name asks for none that exists.
func ValidProfileName(name string) bool { return profileNameRE.MatchString(name) }

func (p *parser) profiles(n *yaml.Node) {
	if !p.isKind(n, yaml.MappingNode, "profiles", "a mapping of name: profile") {
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			p.fail(k.Line, "profiles", "profile name must be a plain string, got %s", describe(k))
			continue
		}
		where := join("profiles", k.Value)
		if first, dup := seen[k.Value]; dup {
			p.fail(k.Line, where, "duplicate profile (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		if !profileNameRE.MatchString(k.Value) {
			p.fail(k.Line, where, "profile name %q must be letters, digits, '.', '_' or '-', start and end with a letter or digit, at most 63 characters", k.Value)
		}
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			p.fail(k.Line, where, "empty profile")
			continue
		}
		pr := Profile{Name: k.Value, Line: k.Line}
		hasSysctls := false
		p.eachField(v, where, map[string]func(k, v *yaml.Node){
			"allowedNamespaces":      func(k, v *yaml.Node) { pr.AllowedNamespaces = p.globs(v, where+".allowedNamespaces") },
			"allowedRuntimeHandlers": func(k, v *yaml.Node) { pr.AllowedRuntimeHandlers = p.globs(v, where+".allowedRuntimeHandlers") },
			"sysctls": func(k, v *yaml.Node) {
				hasSysctls = true
				pr.Sysctls = p.sysctlMap(v, where+".sysctls")
			},
		})
		if v.Kind != yaml.MappingNode {
			continue
		}
		if !hasSysctls {
			p.fail(k.Line, where, "profile has no sysctls")
		}
		p.cfg.Profiles = append(p.cfg.Profiles, pr)
	}
}

func (p *parser) globs(n *yaml.Node, where string) []string {
	if !p.isKind(n, yaml.SequenceNode, where, "a list of names or globs") {
		return nil
	}
	var out []string
	for _, item := range n.Content {
		g := p.str(item, where)
		if g == "" {
			continue
		}
		if _, err := path.Match(g, ""); err != nil {
			p.fail(item.Line, where, "bad glob %q: %v", g, err)
			continue
		}
		out = append(out, g)
	}
	return out
}

// labels reads a mapping of pod labels or annotations (what names which).
func (p *parser) labels(n *yaml.Node, where, what string) map[string]string {
	if !p.isKind(n, yaml.MappingNode, where, "a mapping of "+what+": value") {
		return nil
	}
	out := map[string]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if _, dup := out[k.Value]; dup {
			p.fail(k.Line, join(where, k.Value), "duplicate %s", what)
			continue
		}
		out[k.Value] = p.str(v, join(where, k.Value))
	}
	return out
}

func (p *parser) str(n *yaml.Node, where string) string {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.fail(n.Line, where, "must be a string, got %s", describe(n))
		return ""
	}
	return n.Value
}

func (p *parser) oneOf(n *yaml.Node, where string, allowed ...string) string {
	v := p.str(n, where)
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	if v != "" {
		p.fail(n.Line, where, "%q is not one of: %s", v, strings.Join(allowed, ", "))
	}
	return allowed[0]
}

// optionalString reads a string field that, when given, must not be empty
// or hold NUL or a newline. ok is false when there is nothing to use.
func (p *parser) optionalString(n *yaml.Node, where string) (string, bool) {
	v := p.str(n, where)
	switch {
	case n.Kind != yaml.ScalarNode || n.Tag == "!!null":
		return "", false
	case v == "":
		p.fail(n.Line, where, "must not be empty")
		return "", false
	case strings.ContainsAny(v, "\x00\n"):
		p.fail(n.Line, where, "must not contain NUL or a newline")
		return "", false
	}
	return v, true
}

// socketPath is an absolute path to a unix socket.
func (p *parser) socketPath(n *yaml.Node, where string) string {
	v, ok := p.optionalString(n, where)
	if ok && !path.IsAbs(v) {
		p.fail(n.Line, where, "%q is not an absolute path to containerd's socket", v)
		return ""
	}
	return v
}

// hostPort is a TCP listen address: host:port, host may be empty.
func (p *parser) hostPort(n *yaml.Node, where string) string {
	v, ok := p.optionalString(n, where)
	if !ok {
		return ""
	}
	if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
		p.fail(n.Line, where, "%q is not host:port (e.g. 127.0.0.1:9465)", v)
		return ""
	}
	return v
}

// containerdNamespaceRE is containerd's own rule for namespace names.
var containerdNamespaceRE = regexp.MustCompile(`^[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*$`)

func (p *parser) containerdNamespace(n *yaml.Node, where string) string {
	v, ok := p.optionalString(n, where)
	if ok && (len(v) > 76 || !containerdNamespaceRE.MatchString(v)) {
		p.fail(n.Line, where, "%q is not a containerd namespace name", v)
		return ""
	}
	return v
}

// checkKernel probes every key once in throw-away namespaces, with every
// value the config can give it: the configured ones (defaults, rules and
// profiles) and the host's
// candidates for inheritFromHost. A value the kernel takes in a form of its
// own (jiffies rounding, tcp_fastopen_key's hex) is kept in that form, so
// that what validate prints, the policy gives and the annotations record is
// what a pod reads.
func (p *parser) checkKernel(check KernelChecker) {
	var host []hostMatch
	values := map[string][]string{}
	add := func(entries []Entry) {
		for _, e := range entries {
			values[e.Key] = append(values[e.Key], e.Value)
		}
	}
	add(p.cfg.Sysctls)
	for _, r := range p.cfg.Rules {
		add(r.Sysctls)
	}
	for _, pr := range p.cfg.Profiles {
		add(pr.Sysctls)
	}
	if len(p.cfg.InheritFromHost) > 0 {
		host = p.matchHost()
		for _, m := range host {
			for _, c := range m.candidates {
				values[c.key] = append(values[c.key], c.value)
			}
		}
	}
	refused, stored, err := check(values)
	if err != nil {
		p.fail(0, "", "%v", err)
		return
	}
	k := kernelVerdict{refused: refused, stored: stored}
	report := func(where string, entries []Entry) {
		for i := range entries {
			e := &entries[i]
			value, err := k.judge(e.Key, e.Value)
			if err != nil {
				p.fail(e.Line, join(where, e.Key), "%v", err)
				continue
			}
			if value != sysctl.Fold(e.Value) {
				e.Written = e.Value
			}
			e.Value = value
		}
	}
	report("sysctls", p.cfg.Sysctls)
	for i, r := range p.cfg.Rules {
		report(fmt.Sprintf("rules[%d].sysctls", i), r.Sysctls)
	}
	for _, pr := range p.cfg.Profiles {
		report(join("profiles", pr.Name)+".sysctls", pr.Sysctls)
	}
	if host != nil {
		p.inherit(host, k)
	}
}

// kernelVerdict is what the kernel probe found.
type kernelVerdict struct {
	refused map[string]error
	stored  map[string]map[string]sysctl.Stored
}

// judge returns the form of value pods get, or why the kernel will not
// let a pod have it. A value the checker did not report on is taken as
// written.
func (k kernelVerdict) judge(key, value string) (string, error) {
	if why, bad := k.refused[key]; bad {
		hint := "kernel probe"
		if errors.Is(why, sysctl.ErrMissing) {
			hint = "kernel probe; is the name misspelt?"
		}
		return "", fmt.Errorf("%w (%s)", why, hint)
	}
	s, probed := k.stored[key][value]
	if !probed {
		return value, nil
	}
	return sysctl.Judge(value, s)
}

// yamlErrorLine pulls "line N" out of a yaml.v3 error.
func yamlErrorLine(err error) int {
	var te *yaml.TypeError
	msg := err.Error()
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	var line int
	if i := strings.Index(msg, "line "); i >= 0 {
		fmt.Sscanf(msg[i:], "line %d", &line)
	}
	return line
}
