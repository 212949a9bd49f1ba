// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/plugin/internal/trusteddir"
)

func TestPluginRefusesToStartOnBadConfig(t *testing.T) {
	path := trusteddir.WriteConfig(t, "sysctls:\n  vm.swappiness: 1\n")
	var stderr bytes.Buffer
	code := Run(testOptions(path, filepath.Join(t.TempDir(), "none.sock")), &stderr)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(stderr.String(), path+":2: sysctls.vm.swappiness: vm.swappiness is not namespaced") {
		t.Fatalf("stderr lacks the validate message:\n%s", stderr.String())
	}
}

func TestPluginRefusesInsecureConfig(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the check wants root-owned files")
	}
	path := trusteddir.WriteConfig(t, "sysctls:\n  net.ipv4.tcp_keepalive_time: 600\n")
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	code := Run(testOptions(path, filepath.Join(t.TempDir(), "none.sock")), &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "writable by group or others (mode 0666)") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}
}

// testOptions are the flags' defaults, with the config at path, the NRI
// socket at socket and no kernel probe.
func testOptions(path, socket string) Options {
	return Options{Version: "test", ConfigPath: path, NRISocket: socket, PluginName: "sysctl", PluginIdx: "90", LogLevel: "info", LogFormat: "text", SkipKernelCheck: true}
}
