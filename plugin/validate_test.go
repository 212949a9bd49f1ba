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
)

// The acceptance case: four different problems, each listed with
// its line, in one run.
func TestValidateListsEveryProblem(t *testing.T) {
	path := writeFile(t, `sysctls:
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
	path := writeFile(t, "sysctls:\n  net.ipv4: 1\n  net.core: 1\n  net.ipv4.conf.default: 1\n")
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
	path := writeFile(t, "sysctls:\n  net.ipv4.no_such_key: 1\n")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"validate", "--skip-kernel-check", "--config", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, want 0; %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "valid (1 default(s), 0 rule(s))") {
		t.Fatalf("stdout = %q", stdout.String())
	}
	// Every other check still runs.
	path = writeFile(t, "sysctls:\n  vm.swappiness: 1\n")
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
	large := writeFile(t, "sysctls: {}\n#"+strings.Repeat("x", 2_000_000)+"\n")
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
