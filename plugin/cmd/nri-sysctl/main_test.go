package main

import (
	"bytes"
	"io"
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
