// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package crioimport turns CRI-O's default_sysctls into an nri-sysctl
// config. It is pure: the text of a CRI-O config in, YAML text and the
// entries it could not carry over out.
package crioimport

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// Problem is a default_sysctls entry left out of the config, and why.
type Problem struct {
	File string
	// Line is the entry's line in File, or 0 when it cannot be told.
	Line int
	// Index is the entry's place in default_sysctls.
	Index  int
	Entry  string
	Reason string
}

func (p Problem) Error() string {
	where := p.File
	if p.Line > 0 {
		where += ":" + strconv.Itoa(p.Line)
	}
	return fmt.Sprintf("%s: default_sysctls[%d] %s: %s", where, p.Index, strconv.Quote(p.Entry), p.Reason)
}

// Result is the converted config.
type Result struct {
	// YAML is an nri-sysctl config: every entry that nri-sysctl accepts as
	// a value under sysctls, every other one as a comment with its reason.
	YAML string
	// Problems lists the entries left out, in file order.
	Problems []Problem
}

// crioConfig is the part of crio.conf (or a crio.conf.d drop-in) read here.
type crioConfig struct {
	Crio struct {
		Runtime struct {
			// A pointer tells a missing list from an empty one.
			DefaultSysctls *[]string `toml:"default_sysctls"`
		} `toml:"runtime"`
	} `toml:"crio"`
}

// Convert reads a CRI-O config; source names it in the output and the
// problems. The error is set when there is nothing to convert: the text is
// not TOML, or it has no [crio.runtime] default_sysctls.
func Convert(source string, data []byte) (Result, error) {
	var cfg crioConfig
	if err := toml.Unmarshal(data, &cfg); err != nil {
		var derr *toml.DecodeError
		if errors.As(err, &derr) {
			line, _ := derr.Position()
			reason := strings.TrimPrefix(derr.Error(), "toml: ")
			if slices.Equal(derr.Key(), toml.Key{"crio", "runtime", "default_sysctls"}) {
				// The decoder would name the Go type it wanted.
				reason = `default_sysctls must be a list of "key=value" strings`
			}
			return Result{}, fmt.Errorf("%s:%d: not a CRI-O config: %s", source, line, reason)
		}
		return Result{}, fmt.Errorf("%s: not a CRI-O config: %w", source, err)
	}
	if cfg.Crio.Runtime.DefaultSysctls == nil {
		return Result{}, fmt.Errorf("%s: no default_sysctls in [crio.runtime]: nothing to import", source)
	}
	entries := *cfg.Crio.Runtime.DefaultSysctls
	lines := entryLines(data)
	if len(lines) != len(entries) {
		lines = nil
	}
	lineOf := func(i int) int {
		if lines == nil {
			return 0
		}
		return lines[i]
	}

	// Each entry becomes a value or a left-out comment, in file order.
	type item struct {
		index      int
		key, value string
		problem    *Problem
	}
	var items []item
	last := map[string]int{} // normalized key -> index of its last valid entry
	for i, entry := range entries {
		if entry == "" {
			// CRI-O skips empty entries too.
			continue
		}
		it := item{index: i}
		if reason := check(entry); reason != "" {
			it.problem = &Problem{File: source, Line: lineOf(i), Index: i, Entry: entry, Reason: reason}
		} else {
			k, v, _ := strings.Cut(entry, "=")
			s := sysctl.New(k, v)
			it.key, it.value = s.Key(), s.Value()
			last[it.key] = i
		}
		items = append(items, it)
	}
	// CRI-O sets the entries one after the other, so a later one for the
	// same sysctl wins; nri-sysctl refuses a key twice.
	for n := range items {
		it := &items[n]
		if it.problem == nil && last[it.key] != it.index {
			it.problem = &Problem{File: source, Line: lineOf(it.index), Index: it.index, Entry: entries[it.index],
				Reason: fmt.Sprintf("default_sysctls[%d] sets %s again, and the later value wins in CRI-O too", last[it.key], it.key)}
		}
	}

	var res Result
	var b strings.Builder
	fmt.Fprintf(&b, "# nri-sysctl config imported from CRI-O's [crio.runtime] default_sysctls\n")
	fmt.Fprintf(&b, "# in %s by `nri-sysctl import-crio`.\n", commentSafe(source))
	fmt.Fprintf(&b, "# Check it on the node: nri-sysctl validate --config FILE\n")
	valid := slices.ContainsFunc(items, func(it item) bool { return it.problem == nil })
	if valid {
		b.WriteString("sysctls:\n")
	} else {
		b.WriteString("sysctls: {}\n")
	}
	for _, it := range items {
		if it.problem != nil {
			res.Problems = append(res.Problems, *it.problem)
			indent := "  "
			if !valid {
				indent = ""
			}
			fmt.Fprintf(&b, "%s# left out: %s\n", indent, commentSafe(it.problem.Error()))
			continue
		}
		// strconv.Quote's escapes are all YAML double-quoted escapes.
		fmt.Fprintf(&b, "  %s: %s\n", it.key, strconv.Quote(it.value))
	}
	res.YAML = b.String()
	return res, nil
}

// check says why nri-sysctl (or CRI-O itself) would refuse an entry, or "".
func check(entry string) string {
	k, v, ok := strings.Cut(entry, "=")
	if !ok {
		return "not in key=value form"
	}
	if strings.TrimSpace(k) != k || strings.TrimSpace(v) != v {
		return "spaces around the key or the value (CRI-O refuses them too; write key=value)"
	}
	if err := sysctl.New(k, v).Validate(); err != nil {
		return err.Error()
	}
	return ""
}

// commentSafe keeps a text on its comment line.
func commentSafe(s string) string {
	if strings.ContainsAny(s, "\n\r") {
		return strconv.Quote(s)
	}
	return s
}

// entryLines finds the line of each default_sysctls element, from the
// document's syntax tree: decoding into a struct keeps no positions. It
// returns nil when the list is not written as [crio.runtime] or
// [crio] runtime.default_sysctls = [...] (an inline table, say).
func entryLines(data []byte) []int {
	var p unstable.Parser
	p.Reset(data)
	var table []string
	for p.NextExpression() {
		expr := p.Expression()
		switch expr.Kind {
		case unstable.Table, unstable.ArrayTable:
			table = keyParts(expr.Key())
		case unstable.KeyValue:
			key := append(slices.Clone(table), keyParts(expr.Key())...)
			if !slices.Equal(key, []string{"crio", "runtime", "default_sysctls"}) || expr.Value().Kind != unstable.Array {
				continue
			}
			var lines []int
			elems := expr.Value().Children()
			for elems.Next() {
				if n := elems.Node(); n.Kind != unstable.Comment {
					lines = append(lines, p.Shape(n.Raw).Start.Line)
				}
			}
			return lines
		}
	}
	return nil
}

func keyParts(it unstable.Iterator) []string {
	var parts []string
	for it.Next() {
		parts = append(parts, string(it.Node().Data))
	}
	return parts
}
