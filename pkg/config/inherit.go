// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/nri-sysctl/nri-sysctl/pkg/nsthread"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"gopkg.in/yaml.v3"
)

// procSys is /proc/sys; tests point it at a fake tree.
var procSys = os.DirFS("/proc/sys")

// inHost runs fn with the host's /proc/sys: on a thread, thrown away
// afterwards, in the host's network, IPC and UTS namespaces, since the
// process's own may be a pod's (a DaemonSet) and /proc/sys shows the
// reading thread's. Tests swap it for their fake tree.
var inHost = func(fn func(fs.FS) error) error {
	var err error
	nsthread.Run(func() {
		if err = nsthread.EnterHost(); err != nil {
			err = fmt.Errorf("inheritFromHost needs the host's namespaces: %w", err)
			return
		}
		err = fn(procSys)
	})
	return err
}

// globLeavesOut says why a glob does not bring a key, or "". Named
// exactly, such a key is inherited like any other.
func globLeavesOut(name string) string {
	switch {
	// containerd gives every pod a value of its own for these (0, and
	// every group); the host's kernel defaults would take them away.
	case name == "net.ipv4.ip_unprivileged_port_start", name == sysctl.PingGroupRange:
		return "the runtime gives every pod its own value; name it exactly to inherit the host's"
	// Secrets each network namespace draws for itself: copied, every pod
	// would share the host's, and could predict the others'.
	case name == "net.ipv4.tcp_fastopen_key", name == "net.ipv4.fib_multipath_hash_seed", strings.HasSuffix(name, ".stable_secret"):
		return "a secret each network namespace keeps to itself; name it exactly to inherit the host's"
	}
	return ""
}

// globRE is what a glob may hold: the characters of a sysctl name and
// path.Match's * ? [ ] (with ^ or ! to negate a class). No backslash: a
// name has nothing to escape.
var globRE = regexp.MustCompile(`^[a-z0-9_./*?\[\]!^-]+$`)

func isGlob(pattern string) bool { return strings.ContainsAny(pattern, "*?[") }

// matchesPattern tells whether a normalized name matches a normalized
// pattern. '*' matches across segments ("net.*" is everything under net),
// including a segment with '/' in it (a dot in the file name, as in
// eth0/100), which path.Match would otherwise stop at.
func matchesPattern(pattern, name string) bool {
	ok, _ := path.Match(strings.ReplaceAll(pattern, "/", "\x00"), strings.ReplaceAll(name, "/", "\x00"))
	return ok
}

// inheritList reads inheritFromHost: a list of sysctl names or globs. What
// can be checked without the host (syntax, and whether an exact name is
// namespaced) is checked here; the rest when the host is read.
func (p *parser) inheritList(n *yaml.Node) []Inheritance {
	if !p.isKind(n, yaml.SequenceNode, "inheritFromHost", "a list of sysctl names or globs") {
		return nil
	}
	var out []Inheritance
	seen := map[string]int{}
	for i, item := range n.Content {
		where := fmt.Sprintf("inheritFromHost[%d]", i)
		raw := p.str(item, where)
		if raw == "" {
			if item.Kind == yaml.ScalarNode && item.Tag != "!!null" {
				p.fail(item.Line, where, "empty entry")
			}
			continue
		}
		pattern := sysctl.Normalize(raw)
		if first, dup := seen[pattern]; dup {
			p.fail(item.Line, where, "%s is already listed at line %d", raw, first)
			continue
		}
		seen[pattern] = item.Line
		switch {
		case isGlob(pattern) && !globRE.MatchString(pattern):
			p.fail(item.Line, where, "bad glob %q: want the lower-case characters of a sysctl name and the glob characters * ? [ ]", raw)
			continue
		case isGlob(pattern):
			if _, err := path.Match(pattern, ""); err != nil {
				p.fail(item.Line, where, "bad glob %q: %v", raw, err)
				continue
			}
		default:
			if err := sysctl.ValidateName(pattern); err != nil {
				p.fail(item.Line, where, "%v", err)
				continue
			}
			if err := sysctl.ValidateNamespaced(pattern); err != nil {
				p.fail(item.Line, where, "%v", err)
				continue
			}
		}
		out = append(out, Inheritance{Pattern: pattern, Line: item.Line, Index: i})
	}
	return out
}

// hostValue is a host sysctl and its current value.
type hostValue struct{ key, value string }

// leftOut is a key an entry matched that a pod cannot be given, and why.
type leftOut struct{ key, reason string }

// hostMatch is what one inheritFromHost entry matched on the host, before
// the kernel probe has said which keys a fresh pod namespace has.
type hostMatch struct {
	entry      int // index into Config.InheritFromHost
	candidates []hostValue
	leftOut    []leftOut
}

// matchHost expands each inheritFromHost entry against the host's
// /proc/sys, walked once, and reads the value of every namespaced key that
// matched. An entry that matches nothing, or only node-wide keys, is a
// problem; it is not returned.
func (p *parser) matchHost() []hostMatch {
	var out []hostMatch
	err := inHost(func(host fs.FS) error {
		names, err := hostSysctlNames(host)
		if err != nil {
			return fmt.Errorf("cannot list the host's sysctls: %w", err)
		}
		out = p.matchHostNames(host, names)
		return nil
	})
	if err != nil {
		p.fail(p.cfg.InheritFromHost[0].Line, "inheritFromHost", "%v", err)
		return nil
	}
	return out
}

// matchHostNames does matchHost's work with the host's /proc/sys and the
// names in it.
func (p *parser) matchHostNames(host fs.FS, names []string) []hostMatch {
	values := map[string]hostValue{}
	readErrs := map[string]error{}
	read := func(key string) (hostValue, error) {
		if v, ok := values[key]; ok {
			return v, nil
		}
		if err, ok := readErrs[key]; ok {
			return hostValue{}, err
		}
		v, err := readHostValue(host, key)
		if err != nil {
			readErrs[key] = err
			return hostValue{}, err
		}
		values[key] = hostValue{key, v}
		return values[key], nil
	}
	var out []hostMatch
	for i, in := range p.cfg.InheritFromHost {
		where := fmt.Sprintf("inheritFromHost[%d]", in.Index)
		glob := isGlob(in.Pattern)
		var matched, nodeWide []string
		for _, name := range names {
			if !matchesPattern(in.Pattern, name) {
				continue
			}
			matched = append(matched, name)
			if sysctl.ValidateNamespaced(name) != nil {
				nodeWide = append(nodeWide, name)
			}
		}
		switch {
		case len(matched) == 0 && glob:
			p.fail(in.Line, where, "%s matches no sysctl on this host", in.Pattern)
			continue
		case len(matched) == 0:
			p.fail(in.Line, where, "%s does not exist on this host", in.Pattern)
			continue
		case len(nodeWide) == len(matched):
			p.fail(in.Line, where, "%s matches only sysctls that are not namespaced (%s): pods share the host's values of those already", in.Pattern, examples(nodeWide, ", "))
			continue
		}
		m := hostMatch{entry: i}
		for _, name := range matched {
			if sysctl.ValidateNamespaced(name) != nil {
				continue
			}
			why := ""
			if err := sysctl.ValidateName(name); err != nil {
				why = err.Error()
			} else if sysctl.ProbeName(name) != name {
				why = "a setting of one of the host's network interfaces, which a pod does not have"
			} else if reason := globLeavesOut(name); glob && reason != "" {
				why = reason
			} else if v, err := read(name); err != nil {
				why = err.Error()
			} else {
				m.candidates = append(m.candidates, v)
				continue
			}
			m.leftOut = append(m.leftOut, leftOut{name, why})
		}
		out = append(out, m)
	}
	return out
}

// inherit keeps the candidates whose host value the kernel probe passed and
// adds those values, in the kernel's form, to the base layer, below every
// key the file sets itself.
func (p *parser) inherit(host []hostMatch, k kernelVerdict) {
	explicit := map[string]bool{}
	for _, e := range p.cfg.Sysctls {
		explicit[e.Key] = true
	}
	added := map[string]bool{}
	for _, m := range host {
		in := &p.cfg.InheritFromHost[m.entry]
		dropped := m.leftOut
		for _, c := range m.candidates {
			if why, bad := k.refused[c.key]; bad {
				dropped = append(dropped, leftOut{c.key, why.Error()})
				continue
			}
			value, err := k.judge(c.key, c.value)
			if err != nil {
				dropped = append(dropped, leftOut{c.key, err.Error()})
				continue
			}
			in.Keys = append(in.Keys, c.key)
			if explicit[c.key] || added[c.key] {
				continue
			}
			added[c.key] = true
			p.cfg.Sysctls = append(p.cfg.Sysctls, Entry{Key: c.key, Value: value, Line: in.Line, Source: SourceHost, Pattern: in.Pattern})
		}
		in.LeftOut = len(dropped)
		if len(in.Keys) == 0 {
			var reasons []string
			for _, d := range dropped {
				reasons = append(reasons, d.key+" ("+d.reason+")")
			}
			p.fail(in.Line, fmt.Sprintf("inheritFromHost[%d]", in.Index), "%s matches no sysctl a pod can be given: %s", in.Pattern, examples(reasons, "; "))
		}
	}
	p.cfg.InheritExpanded = true
}

// hostSysctlNames lists every sysctl under fsys in the dot form, sorted. A
// directory that cannot be read is skipped: its keys cannot be inherited.
func hostSysctlNames(fsys fs.FS) ([]string, error) {
	var names []string
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == "." {
				return err
			}
			return nil
		}
		if !d.IsDir() {
			// A path starts with its first segment and a '/', so
			// Normalize swaps: a '.' in a file name becomes '/'.
			names = append(names, sysctl.Normalize(p))
		}
		return nil
	})
	slices.Sort(names)
	return names, err
}

// readHostValue reads a host value in a form the config accepts: without
// the trailing newline, tabs (between the fields of ip_local_port_range or
// tcp_rmem) as spaces, which the kernel reads back alike.
func readHostValue(fsys fs.FS, key string) (string, error) {
	data, err := fs.ReadFile(fsys, strings.TrimPrefix(sysctl.Path(key), "/proc/sys/"))
	if err != nil {
		return "", fmt.Errorf("cannot read the host's value: %w", err)
	}
	value := strings.ReplaceAll(strings.TrimSuffix(string(data), "\n"), "\t", " ")
	if err := sysctl.ValidateValue(value); err != nil {
		return "", fmt.Errorf("the host's value cannot be written back: %w", err)
	}
	return value, nil
}

// examples lists the first few items, and how many more there are.
func examples(items []string, sep string) string {
	const shown = 3
	if len(items) <= shown {
		return strings.Join(items, sep)
	}
	return fmt.Sprintf("%s%sand %d more", strings.Join(items[:shown], sep), sep, len(items)-shown)
}
