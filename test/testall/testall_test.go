// Package testall checks test/test-all.sh, which make test-all runs: the
// targets in order, the background build waited for before the last ones,
// and that build stopped, with its children, when a target fails.
package testall

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeMake prints and records each call's targets, and fails on a target
// named "broken" once the background command has started.
const fakeMake = `#!/bin/sh
echo "make $*" | tee -a "$CALLS"
case " $* " in *" broken "*)
	while [ ! -s "$PIDS" ]; do sleep 0.05; done
	exit 1 ;;
esac
`

// fakeBuild starts a child, records both PIDs, then does what BUILD_MODE
// says: "ok" and "fail" stop the child and exit at once, "hang" waits for it.
const fakeBuild = `#!/bin/sh
sleep 300 &
echo "$$ $!" >"$PIDS"
case $BUILD_MODE in
ok) echo "background build done"; kill $!; exit 0 ;;
fail) echo "background build broke"; kill $!; exit 3 ;;
hang) wait ;;
esac
`

type run struct {
	output string
	calls  []string
	pids   []int
	err    error
}

func runTestAll(t *testing.T, first, last, buildMode string) run {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	makePath := filepath.Join(dir, "make")
	buildPath := filepath.Join(dir, "build")
	for path, text := range map[string]string{makePath: fakeMake, buildPath: fakeBuild} {
		if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	calls := filepath.Join(dir, "calls")
	pids := filepath.Join(dir, "pids")
	cmd := exec.Command(filepath.Join(root, "test", "test-all.sh"), first, last)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "MAKE="+makePath, "NRI_SYSCTL_TEST_ALL_BUILD="+buildPath,
		"CALLS="+calls, "PIDS="+pids, "BUILD_MODE="+buildMode)
	out, err := cmd.CombinedOutput()
	r := run{output: string(out), err: err}
	if text, readErr := os.ReadFile(calls); readErr == nil {
		r.calls = strings.Split(strings.TrimSpace(string(text)), "\n")
	}
	text, readErr := os.ReadFile(pids)
	if readErr != nil {
		t.Fatalf("the background command never ran (%v); output:\n%s", readErr, out)
	}
	for _, f := range strings.Fields(string(text)) {
		pid, convErr := strconv.Atoi(f)
		if convErr != nil {
			t.Fatalf("pids file %q: %v", text, convErr)
		}
		r.pids = append(r.pids, pid)
	}
	t.Cleanup(func() {
		// Only the ones still running: a reaped number may be reused.
		for _, pid := range r.pids {
			if alive(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return r
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

func TestTargetsInOrderWithTheBuildLogBetween(t *testing.T) {
	r := runTestAll(t, "setup e2e", "e2e-k8s vm-test", "ok")
	if r.err != nil {
		t.Fatalf("test-all.sh: %v; output:\n%s", r.err, r.output)
	}
	want := []string{"make --no-print-directory setup e2e", "make --no-print-directory e2e-k8s vm-test"}
	if strings.Join(r.calls, "|") != strings.Join(want, "|") {
		t.Errorf("make calls = %q, want %q", r.calls, want)
	}
	order := []string{want[0], "exit 0", "background build done", want[1]}
	at := -1
	for _, line := range order {
		i := strings.Index(r.output, line)
		if i <= at {
			t.Fatalf("output lacks %q after %q (the build's status and log between the two make calls):\n%s", line, order, r.output)
		}
		at = i
	}
}

func TestAFailedBuildLeavesTheLastTargetsToBuildAgain(t *testing.T) {
	r := runTestAll(t, "setup", "e2e-k8s", "fail")
	if r.err != nil {
		t.Fatalf("test-all.sh: %v; output:\n%s", r.err, r.output)
	}
	if len(r.calls) != 2 || r.calls[1] != "make --no-print-directory e2e-k8s" {
		t.Errorf("make calls = %q, want setup then e2e-k8s", r.calls)
	}
	for _, want := range []string{"exit 3", "background build broke", "make e2e-k8s builds in the foreground"} {
		if !strings.Contains(r.output, want) {
			t.Errorf("output lacks %q:\n%s", want, r.output)
		}
	}
}

func TestAFailedTargetStopsTheBuildAndItsChildren(t *testing.T) {
	r := runTestAll(t, "setup broken", "e2e-k8s", "hang")
	var exitErr *exec.ExitError
	if !errors.As(r.err, &exitErr) {
		t.Fatalf("test-all.sh: err = %v, want a non-zero exit; output:\n%s", r.err, r.output)
	}
	if len(r.calls) != 1 {
		t.Errorf("make calls = %q, want only the failing first one", r.calls)
	}
	if len(r.pids) != 2 {
		t.Fatalf("pids = %v, want the build's and its child's", r.pids)
	}
	// The script has returned; give the killed child a moment to be reaped.
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range r.pids {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if alive(pid) {
			t.Errorf("pid %d still runs after test-all.sh failed", pid)
		}
	}
}
