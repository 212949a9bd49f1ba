// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/probe"
	"github.com/nri-sysctl/nri-sysctl/plugin/internal/trusteddir"
	"github.com/nri-sysctl/nri-sysctl/test/fixture"
)

// The acceptance case: four different problems, each listed with
// its line, in one run.
func TestValidateListsEveryProblem(t *testing.T) {
	path := trusteddir.WriteConfig(t, `sysctls:
  kernel.core_pattern: "|/bin/false"
  net.ipv4.tcp_keepalive_tme: 600
  net.ipv4.tcp_keepalive_intvl: "60\n"
rulez: []
`)
	var stdout, stderr bytes.Buffer
	args := []string{"validate", "--config", path}
	if os.Geteuid() != 0 {
		t.Skip("the kernel probe needs root")
	}
	if code := run(args, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr.String())
	}
	want := []string{
		path + ":2: sysctls.kernel.core_pattern: kernel.core_pattern is not namespaced",
		path + ":3: sysctls.net.ipv4.tcp_keepalive_tme: does not exist in a fresh pod namespace on this kernel",
		path + ":4: sysctls.net.ipv4.tcp_keepalive_intvl: value contains a newline",
		path + ":5: rulez: unknown field",
	}
	out := stderr.String()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	if !strings.Contains(out, "(4 problem(s))") {
		t.Errorf("want exactly 4 problems:\n%s", out)
	}
}

// /proc/sys directories pass the name syntax check; the kernel probe must
// refuse them, or every pod would fail with "is a directory".
func TestValidateRefusesSysctlDirectories(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the kernel probe needs root")
	}
	path := trusteddir.WriteConfig(t, "sysctls:\n  net.ipv4: 1\n  net.core: 1\n  net.ipv4.conf.default: 1\n")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"validate", "--config", path}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1; stdout: %s", code, stdout.String())
	}
	for i, key := range []string{"net.ipv4", "net.core", "net.ipv4.conf.default"} {
		want := fmt.Sprintf("%s:%d: sysctls.%s: is a directory, not a sysctl (kernel probe)", path, i+2, key)
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stderr.String())
		}
	}
}

func TestValidateSkipKernelCheck(t *testing.T) {
	path := trusteddir.WriteConfig(t, "sysctls:\n  net.ipv4.no_such_key: 1\n")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"validate", "--skip-kernel-check", "--config", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, want 0; %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "valid (1 default(s), 0 rule(s), 0 profile(s))") {
		t.Fatalf("stdout = %q", stdout.String())
	}
	// Every other check still runs.
	path = trusteddir.WriteConfig(t, "sysctls:\n  vm.swappiness: 1\n")
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"validate", "--skip-kernel-check", "--config", path}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
}

// validate refuses at once what is not a small regular file: on /dev/zero
// it used to read forever, on a FIFO to wait forever for a writer.
func TestValidateRefusesAllButASmallRegularFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "config.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	large := trusteddir.WriteConfig(t, "sysctls: {}\n#"+strings.Repeat("x", 2_000_000)+"\n")
	for _, tt := range []struct{ path, want string }{
		{"/dev/zero", "/dev/zero: cannot read config: it is a character device, not a regular file"},
		{fifo, fifo + ": cannot read config: it is a named pipe (FIFO), not a regular file"},
		{large, large + ": cannot read config: file is larger than the 1048576-byte (1 MiB) limit"},
	} {
		var stdout, stderr bytes.Buffer
		code := make(chan int, 1)
		go func() {
			code <- run([]string{"validate", "--skip-kernel-check", "--config", tt.path}, &stdout, &stderr)
		}()
		select {
		case c := <-code:
			if c != 1 || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("validate %s: exit %d, want 1 and %q; stderr:\n%s", tt.path, c, tt.want, stderr.String())
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("validate %s did not return within 5 s", tt.path)
		}
	}
}

// Values the kernel refuses make validate exit 1 naming each
// key and the reason, in one run; the real probes run, in throw-away
// namespaces.
func TestValidateRefusesValuesTheKernelRefuses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the kernel probe needs root")
	}
	path := trusteddir.WriteConfig(t, `sysctls:
  net.ipv4.tcp_keepalive_time: "abc"
  net.ipv4.ip_local_port_range: "60000 1000"
  net.core.somaxconn: -5
  net.ipv4.tcp_keepalive_intvl: "010"
rules:
  - sysctls: {net.ipv4.tcp_keepalive_probes: "9 9"}
`)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"validate", "--config", path}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1; stdout:\n%s", code, stdout.String())
	}
	want := []string{
		path + `:2: sysctls.net.ipv4.tcp_keepalive_time: the kernel refuses "abc" (invalid argument)`,
		path + `:3: sysctls.net.ipv4.ip_local_port_range: the kernel refuses "60000 1000" (invalid argument)`,
		path + `:4: sysctls.net.core.somaxconn: the kernel refuses "-5" (invalid argument)`,
		path + `:5: sysctls.net.ipv4.tcp_keepalive_intvl: the kernel stores "010" as "8"; write 8`,
		path + `:7: rules[0].sysctls.net.ipv4.tcp_keepalive_probes: the kernel stores "9 9" as "9": it keeps 1 of its 2 fields`,
	}
	for _, w := range want {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, stderr.String())
		}
	}
	if !strings.Contains(stderr.String(), "(5 problem(s))") {
		t.Errorf("want exactly 5 problems:\n%s", stderr.String())
	}
}

// A value the kernel keeps in a form of its own passes, and validate says
// what pods get; the user namespace probe runs with the clamped GID range
// (unclamped, runc in a user-namespace pod is refused "0 2147483647").
func TestValidatePrintsTheKernelsForm(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the kernel probe needs root")
	}
	path := trusteddir.WriteConfig(t, "sysctls:\n  net.ipv4.icmp_ratelimit: 1001\n  net.ipv4.ping_group_range: \"0 2147483647\"\n")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"validate", "--config", path}, &stdout, &stderr); code != 0 || stderr.Len() > 0 {
		t.Fatalf("exit %d, want 0 and nothing on stderr:\n%s%s", code, stdout.String(), stderr.String())
	}
	// What 1001 ms becomes depends on the kernel's HZ: ask it.
	_, stored, err := probe.Kernel(map[string][]string{"net.ipv4.icmp_ratelimit": {"1001"}})
	if err != nil {
		t.Fatal(err)
	}
	want := path + ": valid (2 default(s), 0 rule(s), 0 profile(s))\n"
	if kept := stored["net.ipv4.icmp_ratelimit"]["1001"].Text; kept != "1001" {
		want += fmt.Sprintf("%s:2: net.ipv4.icmp_ratelimit: the kernel keeps \"1001\" as %q; pods get %s\n", path, kept, kept)
	}
	if stdout.String() != want {
		t.Fatalf("stdout:\n%s\nwant:\n%s", stdout.String(), want)
	}
}

// validate lists each inherited key with the host's value and its entry;
// an explicit value wins and is not listed as inherited.
func TestValidateShowsInheritedKeys(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the kernel probe needs root")
	}
	path := trusteddir.WriteConfig(t, "inheritFromHost:\n  - net.ipv4.tcp_keepalive_*\n  - net.ipv4.ip_local_port_range\nsysctls:\n  net.ipv4.tcp_keepalive_time: 600\n")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"validate", "--config", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	want := path + ": valid (4 default(s), 0 rule(s), 0 profile(s))\n" +
		"net.ipv4.tcp_keepalive_intvl " + fixture.HostValue(t, "net/ipv4/tcp_keepalive_intvl") + " (inherited from the host, entry net.ipv4.tcp_keepalive_*)\n" +
		"net.ipv4.tcp_keepalive_probes " + fixture.HostValue(t, "net/ipv4/tcp_keepalive_probes") + " (inherited from the host, entry net.ipv4.tcp_keepalive_*)\n" +
		"net.ipv4.ip_local_port_range " + fixture.HostValue(t, "net/ipv4/ip_local_port_range") + " (inherited from the host, entry net.ipv4.ip_local_port_range)\n"
	if got := stdout.String(); got != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", got, want)
	}
}

// Without the probe validate cannot expand inheritFromHost: it says so and
// does not fail.
func TestValidateSkipKernelCheckInheritance(t *testing.T) {
	path := trusteddir.WriteConfig(t, "inheritFromHost: [\"net.*\"]\n")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"validate", "--skip-kernel-check", "--config", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "inheritFromHost: 1 entry(ies) not expanded: without the kernel probe (--skip-kernel-check)") {
		t.Errorf("stdout does not say the entries were not expanded:\n%s", stdout.String())
	}
}

func TestValidateWarnsOfUnboundedProfile(t *testing.T) {
	path := trusteddir.WriteConfig(t, fixture.ProfilesConfig)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"validate", "--config", path, "--skip-kernel-check"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, want 0 (a warning does not fail); stderr:\n%s", code, stderr.String())
	}
	want := "warning: " + path + ":10: profiles.many-conns.sysctls.net.core.somaxconn: not in Kubernetes' safe set, and the profile has no allowedNamespaces: a pod in any namespace can ask for it\n"
	if stderr.String() != want {
		t.Errorf("stderr = %q, want %q", stderr.String(), want)
	}
	if !strings.Contains(stdout.String(), "valid (2 default(s), 0 rule(s), 2 profile(s))") {
		t.Errorf("stdout = %q", stdout.String())
	}
}
