// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/plugin/internal/trusteddir"
)

// validateUserKeysEnv makes the test binary, re-run in a user namespace of
// its own, run TestValidateUserKeys's checks there.
const validateUserKeysEnv = "NRI_SYSCTL_TEST_VALIDATE_USER_KEYS"

// userLimits reads every /proc/sys/user file: the limits of this
// process's user namespace.
func userLimits(t *testing.T) string {
	t.Helper()
	paths, err := filepath.Glob("/proc/sys/user/*")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no /proc/sys/user: %v", err)
	}
	sort.Strings(paths)
	var b strings.Builder
	for _, p := range paths {
		v, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(filepath.Base(p) + "=" + strings.TrimSpace(string(v)) + " ")
	}
	return b.String()
}

// validateUserKeyChecks: a valid user.* value passes validate, a bad one
// is refused with the kernel's reason, and this namespace's user.* limits
// are what they were.
func validateUserKeyChecks(t *testing.T) {
	before := userLimits(t)
	t.Run("valid", func(t *testing.T) {
		path := trusteddir.WriteConfig(t, "sysctls:\n  user.max_ipc_namespaces: 777\n  user.max_inotify_watches: 8192\n  net.ipv4.tcp_keepalive_time: 600\n")
		var stdout, stderr bytes.Buffer
		if code := run([]string{"validate", "--config", path}, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d, want 0; stderr:\n%s", code, stderr.String())
		}
		if want := path + ": valid (3 default(s)"; !strings.HasPrefix(stdout.String(), want) {
			t.Errorf("stdout %q, want it to start with %q", stdout.String(), want)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		path := trusteddir.WriteConfig(t, "sysctls:\n  user.max_ipc_namespaces: abc\n  user.max_inotify_watches: \"010\"\n  user.max_bogus: 1\n")
		var stdout, stderr bytes.Buffer
		if code := run([]string{"validate", "--config", path}, &stdout, &stderr); code != 1 {
			t.Fatalf("exit %d, want 1; stdout:\n%s", code, stdout.String())
		}
		for _, want := range []string{
			path + `:2: sysctls.user.max_ipc_namespaces: the kernel refuses "abc" (invalid argument)`,
			path + `:3: sysctls.user.max_inotify_watches: the kernel stores "010" as "8"; write 8`,
			path + `:4: sysctls.user.max_bogus: does not exist`,
			"(3 problem(s))",
		} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
			}
		}
	})
	if after := userLimits(t); after != before {
		t.Errorf("validate changed this namespace's user.* limits from\n%s\nto\n%s", before, after)
	}
}

// validate accepts a valid user.* key (it exited 1 with "is
// read-only inside a pod's namespace" when root lacks CAP_SYS_RESOURCE,
// as here), and leaves the user.* limits of the namespace it runs in
// alone: on this machine, and in a user namespace the test makes to play
// a host whose root may change them (before, validate wrote there).
func TestValidateUserKeys(t *testing.T) {
	if os.Getenv(validateUserKeysEnv) == "1" {
		// The host's stand-in: limits other than the kernel's
		// defaults and the config's values.
		for name, v := range map[string]string{"max_ipc_namespaces": "4321", "max_inotify_watches": "54321"} {
			if err := os.WriteFile("/proc/sys/user/"+name, []byte(v), 0); err != nil {
				t.Fatal(err)
			}
		}
		validateUserKeyChecks(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("the kernel probe needs root")
	}
	validateUserKeyChecks(t)

	cmd := exec.Command("/proc/self/exe", "-test.run", "^TestValidateUserKeys$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), validateUserKeysEnv+"=1")
	identity := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1<<32 - 1}}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: identity, GidMappings: identity, GidMappingsEnableSetgroups: true}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestValidateUserKeys/valid") || !strings.Contains(string(out), "--- PASS: TestValidateUserKeys/invalid") {
		t.Fatalf("in a user namespace playing the host: %v\n%s", err, out)
	}
}
