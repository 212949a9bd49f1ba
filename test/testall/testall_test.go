// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package testall checks test/test-all.sh, which make test-all runs: the
// targets in order, each part of the background build waited for before
// the targets that need it, the build stopped, with its children, when a
// target fails or a signal comes, and make's -n and -k honoured.
package testall

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// scriptTimeout bounds one run of the script: a hang fails the test
// instead of hanging it.
const scriptTimeout = time.Minute

// fakeMake prints and records each call's targets and its own PID. A
// target named "broken" fails once the background command has started,
// "broken-late" once its second part has;
// "hang" waits to be killed; vm-test fails unless the kubelet's build has
// finished, and e2e-k8s unless the rest has (BUILT--kubelet-only,
// BUILT--k8s-only), so a script that does not wait for them fails.
const fakeMake = `#!/bin/sh
echo "make $*" | tee -a "$CALLS"
echo $$ >>"$MAKE_PIDS"
case " $* " in *" broken "*)
	while [ ! -s "$PIDS" ]; do sleep 0.05; done
	exit 1 ;;
esac
case " $* " in *" broken-late "*)
	while [ "$(wc -l <"$PIDS")" -lt 2 ]; do sleep 0.05; done
	exit 1 ;;
esac
case " $* " in *" hang "*)
	exec sleep 300 ;;
esac
case " $* " in *" vm-test "*)
	if [ ! -e "$BUILT--kubelet-only" ]; then echo "vm-test ran before the kubelet's build finished"; exit 1; fi ;;
esac
case " $* " in *" e2e-k8s "*)
	if [ ! -e "$BUILT--k8s-only" ]; then echo "e2e-k8s ran before the background build finished"; exit 1; fi ;;
esac
`

// fakeBuild, given its part as test/setup.sh is (--kubelet-only,
// --k8s-only), starts a child, adds both PIDs to PIDS, then does what
// BUILD_MODE says: "ok" prints its nice value and its autogroup's, takes a
// moment, marks the part done (BUILT<part>), stops the child and exits;
// "fail" stops the child and exits with 3 at once; "hang" waits for the
// child.
const fakeBuild = `#!/bin/sh
sleep 300 &
echo "$$ $!" >>"$PIDS"
case $BUILD_MODE in
ok) echo "priority: nice $(nice), $(cat /proc/self/autogroup 2>/dev/null)"
	sleep 1; touch "$BUILT$1"; echo "background build $1 done"; kill $!; exit 0 ;;
fail) echo "background build $1 broke"; kill $!; exit 3 ;;
hang) wait ;;
esac
`

type run struct {
	output string
	calls  []string
	// pids: the background build's and its child's; makePIDs: each make call's.
	pids, makePIDs []int
	err            error
}

// script is one run of test-all.sh with the fake make and build.
type script struct {
	cmd *exec.Cmd
	ctx context.Context
	out strings.Builder
	dir string
}

func newScript(t *testing.T, stages [3]string, buildMode, makeflags string) *script {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	s := &script{dir: t.TempDir()}
	makePath := filepath.Join(s.dir, "make")
	buildPath := filepath.Join(s.dir, "build")
	for path, text := range map[string]string{makePath: fakeMake, buildPath: fakeBuild} {
		if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	t.Cleanup(cancel)
	s.ctx = ctx
	s.cmd = exec.CommandContext(ctx, filepath.Join(root, "test", "test-all.sh"), stages[0], stages[1], stages[2])
	s.cmd.Dir = root
	// Its own process group, killed whole on the timeout.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s.cmd.Cancel = func() error { return syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL) }
	s.cmd.WaitDelay = 5 * time.Second
	s.cmd.Env = append(os.Environ(), "MAKE="+makePath, "NRI_SYSCTL_TEST_ALL_BUILD="+buildPath,
		"CALLS="+s.path("calls"), "PIDS="+s.path("pids"), "MAKE_PIDS="+s.path("make-pids"), "BUILT="+s.path("built"),
		"BUILD_MODE="+buildMode, "MAKEFLAGS="+makeflags, "TMPDIR="+s.dir)
	s.cmd.Stdout = &s.out
	s.cmd.Stderr = &s.out
	return s
}

func (s *script) path(name string) string { return filepath.Join(s.dir, name) }

// result reads what the run left, and stops, at the test's end, whatever
// of it still runs.
func (s *script) result(t *testing.T, err error) run {
	t.Helper()
	r := run{output: s.out.String(), err: err}
	if s.ctx.Err() != nil {
		t.Errorf("test-all.sh did not finish within %s; output:\n%s", scriptTimeout, r.output)
	}
	if text, readErr := os.ReadFile(s.path("calls")); readErr == nil {
		r.calls = strings.Split(strings.TrimSpace(string(text)), "\n")
	}
	r.pids = readPIDs(t, s.path("pids"))
	r.makePIDs = readPIDs(t, s.path("make-pids"))
	t.Cleanup(func() {
		// Only the ones still running: a reaped number may be reused.
		for _, pid := range append(r.pids, r.makePIDs...) {
			if alive(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return r
}

func readPIDs(t *testing.T, path string) []int {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(text)) {
		pid, convErr := strconv.Atoi(f)
		if convErr != nil {
			t.Fatalf("%s: %q: %v", path, text, convErr)
		}
		pids = append(pids, pid)
	}
	return pids
}

func runTestAll(t *testing.T, stages [3]string, buildMode, makeflags string) run {
	t.Helper()
	s := newScript(t, stages, buildMode, makeflags)
	r := s.result(t, s.cmd.Run())
	if len(r.pids) == 0 && !strings.Contains(makeflags, "n") {
		t.Fatalf("the background command never ran; output:\n%s", r.output)
	}
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

// wantGone fails for each pid still running a moment after the script
// returned (a killed process is reaped by its parent shortly after).
func wantGone(t *testing.T, what string, pids []int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if alive(pid) {
			t.Errorf("%s: pid %d still runs after test-all.sh returned", what, pid)
		}
	}
}

func TestTargetsInOrderWithTheBuildLogsBetween(t *testing.T) {
	r := runTestAll(t, [3]string{"setup e2e", "vm-test", "e2e-k8s"}, "ok", "")
	if r.err != nil {
		t.Fatalf("test-all.sh: %v; output:\n%s", r.err, r.output)
	}
	want := []string{"make --no-print-directory setup e2e", "make --no-print-directory vm-test", "make --no-print-directory e2e-k8s"}
	if strings.Join(r.calls, "|") != strings.Join(want, "|") {
		t.Errorf("make calls = %q, want %q", r.calls, want)
	}
	order := []string{want[0], "exit 0", "background build --kubelet-only done", want[1], "exit 0", "background build --k8s-only done", want[2]}
	at := -1
	for _, line := range order {
		i := strings.Index(r.output[at+1:], line)
		if i < 0 {
			t.Fatalf("output lacks %q after %q (each part's status and log before the targets that need it):\n%s", line, order, r.output)
		}
		at += 1 + i
	}
	// The second part starts only once the first targets are done (the
	// first part's log is printed after them).
	if strings.Index(r.output, "building in the background: test/setup.sh --k8s-only") < strings.Index(r.output, "background build --kubelet-only done") {
		t.Errorf("the rest of the build started before the first targets ended:\n%s", r.output)
	}
}

// The build must yield to the targets: nice 19, and where the kernel
// groups each session (autogroup), the new session's group at 19 too, or
// the two sessions share the CPU equally whatever the processes' nice.
func TestTheBuildRunsAtTheLowestPriority(t *testing.T) {
	r := runTestAll(t, [3]string{"setup", "vm-test", "e2e-k8s"}, "ok", "")
	if r.err != nil {
		t.Fatalf("test-all.sh: %v; output:\n%s", r.err, r.output)
	}
	if strings.Count(r.output, "priority: nice 19,") != 2 {
		t.Errorf("the background build does not run at nice 19; output:\n%s", r.output)
	}
	if _, err := os.Stat("/proc/self/autogroup"); err != nil {
		t.Logf("no autogroup on this kernel (%v): its nice not checked", err)
		return
	}
	if n := len(regexp.MustCompile(`priority: nice 19, /autogroup-[0-9]+ nice 19`).FindAllString(r.output, -1)); n != 2 {
		t.Errorf("the background build's autogroup is not at nice 19; output:\n%s", r.output)
	}
}

// (The fake vm-test and e2e-k8s would refuse to run without the build;
// the real ones build what is missing.)
func TestAFailedBuildLeavesTheLaterTargetsToBuildAgain(t *testing.T) {
	r := runTestAll(t, [3]string{"setup", "vm", "k8s"}, "fail", "")
	if r.err != nil {
		t.Fatalf("test-all.sh: %v; output:\n%s", r.err, r.output)
	}
	if strings.Join(r.calls, "|") != "make --no-print-directory setup|make --no-print-directory vm|make --no-print-directory k8s" {
		t.Errorf("make calls = %q, want setup, vm, k8s", r.calls)
	}
	for _, want := range []string{"exit 3", "background build --kubelet-only broke", "background build --k8s-only broke", "the next targets build it in the foreground"} {
		if !strings.Contains(r.output, want) {
			t.Errorf("output lacks %q:\n%s", want, r.output)
		}
	}
}

func TestAFailedTargetStopsTheBuildAndItsChildren(t *testing.T) {
	r := runTestAll(t, [3]string{"setup broken", "vm-test", "e2e-k8s"}, "hang", "")
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
	wantGone(t, "the background build", r.pids)
}

// A failure in the middle targets stops the script and the rest of the
// build, with its child.
func TestAFailedMiddleTargetStopsTheRestOfTheBuild(t *testing.T) {
	r := runTestAll(t, [3]string{"setup", "broken-late", "e2e-k8s"}, "ok", "")
	var exitErr *exec.ExitError
	if !errors.As(r.err, &exitErr) {
		t.Fatalf("test-all.sh: err = %v, want a non-zero exit; output:\n%s", r.err, r.output)
	}
	if len(r.calls) != 2 {
		t.Errorf("make calls = %q, want setup and broken-late only", r.calls)
	}
	if len(r.pids) != 4 {
		t.Fatalf("pids = %v, want both parts' and their children's", r.pids)
	}
	wantGone(t, "the background build", r.pids)
}

// make -k test-all: a failure in the first targets does not stop the
// last ones, and the script still fails.
func TestKeepGoingRunsTheLastTargetsAfterAFailure(t *testing.T) {
	r := runTestAll(t, [3]string{"setup broken", "vm-test", "e2e-k8s"}, "ok", "k")
	var exitErr *exec.ExitError
	if !errors.As(r.err, &exitErr) {
		t.Fatalf("test-all.sh under make -k: err = %v, want a non-zero exit; output:\n%s", r.err, r.output)
	}
	want := []string{"make --no-print-directory setup broken", "make --no-print-directory vm-test", "make --no-print-directory e2e-k8s"}
	if strings.Join(r.calls, "|") != strings.Join(want, "|") {
		t.Errorf("make calls under -k = %q, want %q", r.calls, want)
	}
}

// make -n test-all prints what would run: nothing starts in the background.
func TestDryRunBuildsNothingInTheBackground(t *testing.T) {
	// (vm and k8s: the fake vm-test and e2e-k8s would refuse to run
	// without the build, where make -n would only print them.)
	r := runTestAll(t, [3]string{"setup e2e", "vm", "k8s"}, "hang", "n")
	if len(r.pids) != 0 {
		t.Errorf("make -n started the background build (pids %v)", r.pids)
	}
	want := []string{"make --no-print-directory setup e2e", "make --no-print-directory vm", "make --no-print-directory k8s"}
	if strings.Join(r.calls, "|") != strings.Join(want, "|") {
		t.Errorf("make calls under -n = %q, want %q", r.calls, want)
	}
}

// SIGTERM to the script (what make passes on, the recipe being exec'd)
// stops the make under way and the background build with its child.
func TestASignalStopsMakeAndTheBuild(t *testing.T) {
	s := newScript(t, [3]string{"setup hang", "vm-test", "e2e-k8s"}, "hang", "")
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(scriptTimeout)
	for len(readPIDs(t, s.path("pids"))) < 2 || len(readPIDs(t, s.path("make-pids"))) < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the build and the first make never both started; output:\n%s", s.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := s.result(t, s.cmd.Wait())
	var exitErr *exec.ExitError
	if !errors.As(r.err, &exitErr) || exitErr.ExitCode() != 143 {
		t.Errorf("test-all.sh after SIGTERM: %v, want exit 143; output:\n%s", r.err, r.output)
	}
	wantGone(t, "the make under way", r.makePIDs)
	wantGone(t, "the background build", r.pids)
	if len(r.calls) != 1 {
		t.Errorf("make calls = %q, want only the first", r.calls)
	}
}
