// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"version"}, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), "nri-sysctl ") {
		t.Fatalf("exit %d, stdout %q", code, stdout.String())
	}
}

func TestUnknownFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--no-such-flag"}, &stdout, &stderr); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
}

// -h and --help print the command's usage and exit 0, for the plugin and
// every subcommand alike.
func TestHelpExitsZero(t *testing.T) {
	for _, c := range commands {
		for _, h := range []string{"-h", "--help"} {
			args := []string{h}
			if c.name != "" {
				args = []string{c.name, h}
			}
			var stdout, stderr bytes.Buffer
			if code := run(args, &stdout, &stderr); code != 0 || !strings.Contains(stderr.String(), "Usage") {
				t.Errorf("%v: exit %d, want 0 and the usage; stderr %q", args, code, stderr.String())
			}
		}
	}
}

// The usage is made from the commands' own flags, so none is left out.
func TestUsageListsEveryFlag(t *testing.T) {
	var stderr bytes.Buffer
	if code := run([]string{"--help"}, io.Discard, &stderr); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	usage := stderr.String()
	for _, want := range []string{"nri-sysctl import-crio PATH", "explain flags:\n", "  --mode value", "audit flags:\n", "  --timeout duration", "  --config string", "  --metrics-address string"} {
		if !strings.Contains(usage, want) {
			t.Errorf("usage lacks %q:\n%s", want, usage)
		}
	}
}

// One rule for positional arguments, for every command: exactly those its
// usage line names; another is refused with the usage and exit 2, before
// the command runs.
func TestEveryCommandTakesItsArgumentsAlone(t *testing.T) {
	for _, c := range commands {
		args := append([]string{c.name}, strings.Fields(c.args)...)
		if c.name == "" {
			args = args[1:]
		}
		var stdout, stderr bytes.Buffer
		extra := append(slices.Clone(args), "surplus")
		if code := run(extra, &stdout, &stderr); code != usageExit.code || !strings.Contains(stderr.String(), `unexpected argument "surplus"`) || !strings.Contains(stderr.String(), "Usage") {
			t.Errorf("%q: exit %d, stderr %q; want %d, the extra argument named and the usage", extra, code, stderr.String(), usageExit.code)
		}
		if c.args == "" {
			continue
		}
		stderr.Reset()
		if code := run([]string{c.name}, &stdout, &stderr); code != usageExit.code || !strings.Contains(stderr.String(), "missing "+c.args) {
			t.Errorf("%s without %s: exit %d, stderr %q; want %d and what is missing", c.name, c.args, code, stderr.String(), usageExit.code)
		}
	}
}

// docs/operating.md holds every command's exit codes as the table says
// them; each command lists 0 and the usage's 2.
func TestExitCodesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	want := exitCodeTable()
	if !strings.Contains(string(doc), want) {
		t.Errorf("docs/operating.md lacks the exit-code table as the command table has it; put this under \"Exit codes\":\n%s", want)
	}
	for _, c := range commands {
		codes := map[int]bool{}
		for _, e := range c.exits {
			codes[e.code] = true
		}
		if !codes[0] || !codes[usageExit.code] {
			t.Errorf("command %q: exit codes %v, want 0 and %d among them", c.name, c.exits, usageExit.code)
		}
	}
}

// The man page's synopsis and description name each command of the table,
// and no other.
func TestManPageListsEveryCommand(t *testing.T) {
	page, err := os.ReadFile("../../../hack/packages/files/nri-sysctl.8")
	if err != nil {
		t.Fatal(err)
	}
	synopsis := map[string]bool{}
	described := map[string]bool{}
	section := ""
	for _, line := range strings.Split(string(page), "\n") {
		if s, ok := strings.CutPrefix(line, ".SH "); ok {
			section = s
			continue
		}
		words, ok := strings.CutPrefix(line, ".B ")
		if !ok {
			continue
		}
		f := strings.Fields(words)
		switch {
		case section == "SYNOPSIS" && f[0] == "nri-sysctl":
			name := ""
			if len(f) > 1 {
				name = f[1]
			}
			synopsis[name] = true
		case section == "DESCRIPTION" && len(f) == 1 && f[0] != "nri-sysctl" && !strings.Contains(f[0], "."):
			described[f[0]] = true
		}
	}
	table := map[string]bool{}
	for _, c := range commands {
		table[c.name] = true
		if !synopsis[c.name] {
			t.Errorf("the man page's SYNOPSIS lacks `nri-sysctl %s`", c.name)
		}
		if c.name != "" && !described[c.name] {
			t.Errorf("the man page's DESCRIPTION lacks .B %s", c.name)
		}
	}
	for name := range synopsis {
		if !table[name] {
			t.Errorf("the man page's SYNOPSIS has `nri-sysctl %s`, which is no command", name)
		}
	}
	for name := range described {
		if !table[name] {
			t.Errorf("the man page's DESCRIPTION has .B %s, which is no command", name)
		}
	}
}
