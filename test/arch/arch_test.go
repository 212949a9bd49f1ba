// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package arch checks that the binaries `make image` builds for each
// architecture behave alike: the other architecture's binary runs under
// qemu user emulation (Debian's qemu-user-static, test/setup.sh) and gives
// the host binary's output, byte for byte, for version, validate and
// explain. Both skip the kernel check: its probe re-executes the binary and
// makes namespaces, which is the host kernel's business, not emulation's.
//
// make arch-test runs it with NRI_SYSCTL_ARCH_TEST=1, which turns a missing
// binary or qemu into a failure instead of a skip.
package arch

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// architectures: each one's ELF machine and the qemu user emulator that
// runs its binaries on another host.
var architectures = map[string]struct {
	machine elf.Machine
	qemu    []string // qemu-user-static's name first, then qemu-user's
}{
	"amd64": {elf.EM_X86_64, []string{"qemu-x86_64-static", "qemu-x86_64"}},
	"arm64": {elf.EM_AARCH64, []string{"qemu-aarch64-static", "qemu-aarch64"}},
}

// missing fails under make arch-test and skips elsewhere.
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("NRI_SYSCTL_ARCH_TEST") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg + " (make arch-test builds and checks it)")
}

// binaryOf is where make build GOARCH=arch writes the binary, unless
// NRI_SYSCTL_BINARIES ("ARCH=PATH ...", make arch-test) says otherwise;
// it checks the binary is one of that architecture.
func binaryOf(t *testing.T, arch string) string {
	t.Helper()
	var path string
	for _, f := range strings.Fields(os.Getenv("NRI_SYSCTL_BINARIES")) {
		if a, p, _ := strings.Cut(f, "="); a == arch {
			path = p
		}
	}
	if path == "" {
		path = filepath.Join("..", "..", "bin", "linux-"+arch, "nri-sysctl")
		if arch == runtime.GOARCH {
			path = filepath.Join("..", "..", "bin", "nri-sysctl")
		}
	}
	f, err := elf.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		missing(t, "%s is missing: make build GOARCH=%s", path, arch)
	}
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	if want := architectures[arch].machine; f.Machine != want {
		t.Fatalf("%s is a %s binary, want %s for %s", path, f.Machine, want, arch)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// runner is how to run one architecture's binary on this host: itself, or
// under its qemu.
type runner struct {
	arch   string
	prefix []string
}

func runnerFor(t *testing.T, arch string) runner {
	t.Helper()
	bin := binaryOf(t, arch)
	if arch == runtime.GOARCH {
		return runner{arch: arch, prefix: []string{bin}}
	}
	for _, name := range architectures[arch].qemu {
		if qemu, err := exec.LookPath(name); err == nil {
			return runner{arch: arch, prefix: []string{qemu, bin}}
		}
	}
	missing(t, "none of %v in PATH: apt-get install qemu-user-static (test/setup.sh)", architectures[arch].qemu)
	return runner{}
}

// result is what a run gives: its exit code and its output.
type result struct {
	code           int
	stdout, stderr string
}

func (r runner) run(t *testing.T, dir string, args ...string) result {
	t.Helper()
	cmd := exec.Command(r.prefix[0], append(r.prefix[1:], args...)...)
	cmd.Dir = dir
	// No inherited QEMU_* or GODEBUG settings change what either prints.
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s %v: %v", r.arch, args, err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// A config with a rule, a profile and an exclusion, and one that is bad in
// two ways: explain and validate walk every part of the decision.
const (
	fullConfig = `sysctls:
  net.ipv4.tcp_keepalive_time: 600
  net.ipv4.tcp_keepalive_intvl: 60
  kernel.msgmax: 16384
rules:
  - name: busy-frontends
    match: {namespaces: ["web-*"], labels: {tier: frontend}}
    sysctls: {net.core.somaxconn: 4096}
profiles:
  low-latency:
    allowedNamespaces: ["trading-*"]
    sysctls: {net.ipv4.tcp_slow_start_after_idle: 0}
exclude:
  namespaces: ["kube-system"]
`
	badConfig = `sysctls:
  net.ipv4.tcp_keepalive_time: 600
  vm.swappiness: 10
  net.ipv4.ip_local_port_range: "60000 1000"
`
)

func TestOtherArchitectureGivesTheSameOutput(t *testing.T) {
	host := runnerFor(t, runtime.GOARCH)
	var others []runner
	for arch := range architectures {
		if arch != runtime.GOARCH {
			others = append(others, runnerFor(t, arch))
		}
	}
	// The example config the packages ship, and the two above, by
	// relative paths so that messages naming the file read alike.
	dir := t.TempDir()
	example, err := os.ReadFile(filepath.Join("..", "..", "config", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"config.yaml": string(example), "full.yaml": fullConfig, "bad.yaml": badConfig} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	explain := []string{"explain", "--skip-kernel-check", "--config"}
	for _, c := range []struct {
		args     []string
		code     int
		contains string // in stdout or stderr of the host's run
	}{
		{[]string{"version"}, 0, "nri-sysctl"},
		{[]string{"validate", "--skip-kernel-check", "--config", "config.yaml"}, 0, "config.yaml: valid (3 default(s)"},
		{[]string{"validate", "--skip-kernel-check", "--config", "full.yaml"}, 0, "full.yaml: valid (3 default(s), 1 rule(s), 1 profile(s))"},
		{[]string{"validate", "--skip-kernel-check", "--config", "bad.yaml"}, 1, "vm.swappiness"},
		{append(explain, "config.yaml", "--namespace", "default", "--name", "web"), 0, "net.ipv4.tcp_keepalive_probes 5 applied"},
		{append(explain, "config.yaml", "--namespace", "default", "--pod-sysctl", "net.ipv4.tcp_keepalive_time=300"), 0, "skipped (pod sets it itself)"},
		{append(explain, "config.yaml", "--namespace", "kube-system"), 0, "excluded"},
		{append(explain, "full.yaml", "--namespace", "web-shop", "--label", "tier=frontend", "--host-ipc"), 0, "busy-frontends"},
		{append(explain, "full.yaml", "--namespace", "trading-eu", "--annotation", "nri-sysctl.io/profiles=low-latency", "--host-users=false", "--mode", "namespace"), 0, "low-latency"},
		{append(explain, "full.yaml", "--namespace", "default", "--annotation", "nri-sysctl.io/profiles=low-latency", "--host-network"), 0, "low-latency"},
		{append(explain, "bad.yaml", "--namespace", "default"), 1, "vm.swappiness"},
	} {
		want := host.run(t, dir, c.args...)
		if want.code != c.code || !strings.Contains(want.stdout+want.stderr, c.contains) {
			t.Errorf("%s on %s: exit %d, want %d with %q in its output:\n%s%s", strings.Join(c.args, " "), host.arch, want.code, c.code, c.contains, want.stdout, want.stderr)
			continue
		}
		for _, other := range others {
			got := other.run(t, dir, c.args...)
			if got != want {
				t.Errorf("%s: %s (under %s) gives exit %d\n%s%s\n%s gives exit %d\n%s%s", strings.Join(c.args, " "),
					other.arch, filepath.Base(other.prefix[0]), got.code, got.stdout, got.stderr, host.arch, want.code, want.stdout, want.stderr)
			}
		}
	}
}
