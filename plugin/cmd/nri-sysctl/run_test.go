// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/plugin"
)

func TestWatchConfigFlag(t *testing.T) {
	var stderr bytes.Buffer
	o, err := parseRunFlags([]string{"--watch-config=2s", "--remove-taint"}, &stderr)
	if err != nil || o.WatchConfig != 2*time.Second || !o.RemoveTaint {
		t.Fatalf("parse: %+v %v", o, err)
	}
	if _, err := parseRunFlags([]string{"--watch-config=-1s"}, &stderr); err == nil {
		t.Fatal("a negative --watch-config was accepted")
	}
}

func TestRunRefusesBadLastGoodFlag(t *testing.T) {
	for _, tc := range []struct{ args []string }{
		{[]string{"--last-good-config", "relative.yaml"}},
		{[]string{"--config", "/etc/nri-sysctl/config.yaml", "--last-good-config", "/etc/nri-sysctl/config.yaml"}},
	} {
		var stderr strings.Builder
		if _, err := parseRunFlags(tc.args, &stderr); err == nil || !strings.Contains(stderr.String(), "bad --last-good-config") {
			t.Errorf("%v: err %v, stderr %q", tc.args, err, stderr.String())
		}
	}
	o, err := parseRunFlags([]string{"--last-good-config", "/var/lib/nri-sysctl/last-good-config.yaml"}, io.Discard)
	if err != nil || o.LastGoodConfig != "/var/lib/nri-sysctl/last-good-config.yaml" {
		t.Fatalf("%+v %v", o, err)
	}
}

// Review finding 3: a bogus --mode is refused at start.
func TestBogusModeFlagIsRefused(t *testing.T) {
	var stderr strings.Builder
	if _, err := parseRunFlags([]string{"--mode", "bogus"}, &stderr); err == nil {
		t.Fatal("--mode bogus accepted")
	}
	if !strings.Contains(stderr.String(), `unknown mode "bogus"`) {
		t.Errorf("stderr %q does not say why", stderr.String())
	}
}

// parseRunFlags parses the plugin's flags as run does.
func parseRunFlags(args []string, stderr io.Writer) (plugin.Options, error) {
	fs := flag.NewFlagSet("nri-sysctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { printUsage(stderr) }
	var o plugin.Options
	declareRunFlags(fs, &o)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	return o, checkRunFlags(fs, &o, stderr)
}

// A containerd flag given, even with its default value, wins over the
// config (plugin.ContainerdFlags); one not given does not.
func TestContainerdFlagsGiven(t *testing.T) {
	o, err := parseRunFlags([]string{"--containerd-address", plugin.DefaultContainerdAddress}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := plugin.ContainerdFlags{Address: plugin.DefaultContainerdAddress, Namespace: plugin.DefaultContainerdNamespace, AddressSet: true}
	if o.Containerd != want {
		t.Errorf("--containerd-address given: %+v, want %+v", o.Containerd, want)
	}
	if o, err = parseRunFlags(nil, io.Discard); err != nil || o.Containerd.AddressSet || o.Containerd.NamespaceSet {
		t.Errorf("no containerd flag: %+v %v, want neither set", o.Containerd, err)
	}
}

// --running-pods takes converge or keep, and the plugin's pod
// state has a default directory.
func TestRunningPodsFlag(t *testing.T) {
	var stderr strings.Builder
	if _, err := parseRunFlags([]string{"--running-pods", "always"}, &stderr); err == nil || !strings.Contains(stderr.String(), `"always" is not one of: converge, keep`) {
		t.Errorf("--running-pods always: err %v, stderr %q", err, stderr.String())
	}
	o, err := parseRunFlags([]string{"--running-pods", "keep"}, io.Discard)
	if err != nil || o.RunningPods != "keep" || o.PodStateDir != "/run/nri-sysctl/pods" {
		t.Fatalf("%+v %v", o, err)
	}
}
