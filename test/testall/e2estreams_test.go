// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package testall

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeGo stands in for go test in test/e2e.sh: it records the line and its
// -run pattern, fails for the line FAIL names, hangs (recording its PID) for
// HANG, and for the lines in MEET waits until every one of them has
// started, so that lines run one after another cannot pass.
const fakeGo = `#!/bin/bash
v=$NRI_SYSCTL_CONTAINERD_VERSION
for ((i = 1; i <= $#; i++)); do [[ ${!i} == -run ]] && { j=$((i + 1)); pattern=${!j}; }; done
echo "$v $pattern" >>"$CALLS"
echo "go test for $v"
if [[ " $MEET " == *" $v "* ]]; then
	touch "$DIR/started-$v"
	for ((n = 0; n < 200; n++)); do
		all=1
		for m in $MEET; do [[ -e $DIR/started-$m ]] || all=0; done
		[[ $all == 1 ]] && break
		sleep 0.05
	done
	[[ $all == 1 ]] || { echo "$v: the other stream's line never started"; exit 1; }
fi
[[ $v == "$HANG" ]] && { echo $$ >>"$DIR/hung"; exec sleep 300; }
[[ $v != "$FAIL" ]]
`

// e2eRun is one run of e2e.sh with the fake go: its output, the lines it
// ran ("VERSION PATTERN"), and how it ended.
type e2eRun struct {
	output string
	calls  []string
	err    error
}

// fakeGoDir makes a directory with the fake go in it; it returns the
// repository's root, the directory and the fake's path.
func fakeGoDir(t *testing.T) (root, dir, goPath string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	goPath = filepath.Join(dir, "go")
	if err := os.WriteFile(goPath, []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	return root, dir, goPath
}

func runE2EScript(t *testing.T, env ...string) e2eRun {
	t.Helper()
	root, dir, goPath := fakeGoDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "test", "e2e.sh"), "v1 v2 v3 v4 v5", "v1 v3", "^(TestA|TestB)$")
	cmd.Dir = root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(append(os.Environ(), "E2E_JOBS=2", "GO="+goPath, "CALLS="+filepath.Join(dir, "calls"), "DIR="+dir, "TMPDIR="+dir), env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Errorf("e2e.sh did not finish within %s; output:\n%s", scriptTimeout, out)
	}
	text, _ := os.ReadFile(filepath.Join(dir, "calls"))
	return e2eRun{output: string(out), calls: strings.Split(strings.TrimSpace(string(text)), "\n"), err: err}
}

func exitCode(err error) int {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestE2EStreams: make e2e's two streams (test/e2e.sh) run every line once,
// with its pattern, the two full lines at the same time and in different
// streams; a failing line fails the run and stops its own stream only.
func TestE2EStreams(t *testing.T) {
	t.Run("every line once, the full lines at once", func(t *testing.T) {
		r := runE2EScript(t, "MEET=v1 v3")
		out, calls, err := r.output, r.calls, r.err
		if err != nil {
			t.Fatalf("e2e.sh: %v\n%s", err, out)
		}
		want := map[string]string{"v1": ".", "v2": "^(TestA|TestB)$", "v3": ".", "v4": "^(TestA|TestB)$", "v5": "^(TestA|TestB)$"}
		seen := map[string]bool{}
		for _, c := range calls {
			v, pattern, _ := strings.Cut(c, " ")
			if seen[v] {
				t.Errorf("%s ran twice", v)
			}
			seen[v] = true
			if want[v] != pattern {
				t.Errorf("%s ran with -run %q, want %q", v, pattern, want[v])
			}
		}
		if len(seen) != len(want) {
			t.Errorf("lines run: %v, want %d", calls, len(want))
		}
		for _, s := range []string{"lines [v1 v2 v5] [v3 v4]", "=== containerd v5: passed", "=== end-to-end tests: exit 0"} {
			if !strings.Contains(out, s) {
				t.Errorf("output lacks %q:\n%s", s, out)
			}
		}
	})
	t.Run("a failing line", func(t *testing.T) {
		r := runE2EScript(t, "FAIL=v2")
		out, calls, err := r.output, r.calls, r.err
		if exitCode(err) != 1 {
			t.Errorf("exit %v, want 1\n%s", err, out)
		}
		joined := strings.Join(calls, ",")
		if strings.Contains(joined, "v5") {
			t.Errorf("v5 ran after v2 failed in its stream: %v", calls)
		}
		if !strings.Contains(joined, "v4") || !strings.Contains(out, "=== containerd v4: passed") {
			t.Errorf("the other stream did not finish: %v\n%s", calls, out)
		}
		if !strings.Contains(out, "=== containerd v2: FAILED") {
			t.Errorf("output does not name the failed line:\n%s", out)
		}
	})
	t.Run("E2E_JOBS=1: in order", func(t *testing.T) {
		r := runE2EScript(t, "E2E_JOBS=1")
		out, calls, err := r.output, r.calls, r.err
		if err != nil {
			t.Fatalf("e2e.sh: %v\n%s", err, out)
		}
		var order []string
		for _, c := range calls {
			order = append(order, strings.Fields(c)[0])
		}
		if got := strings.Join(order, " "); got != "v1 v2 v3 v4 v5" {
			t.Errorf("order %s, want v1 v2 v3 v4 v5", got)
		}
	})
}

// TestE2EStreamsStopped: SIGTERM to e2e.sh stops both streams' processes.
func TestE2EStreamsStopped(t *testing.T) {
	root, dir, goPath := fakeGoDir(t)
	// Both streams' first lines hang: HANG names one, so the script runs
	// each through a go whose HANG is its own line.
	wrapper := filepath.Join(dir, "go-hang")
	if err := os.WriteFile(wrapper, []byte("#!/bin/bash\nHANG=$NRI_SYSCTL_CONTAINERD_VERSION exec "+goPath+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "test", "e2e.sh"), "v1 v2", "v1 v2", ".")
	cmd.Dir = root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), "GO="+wrapper, "CALLS="+filepath.Join(dir, "calls"), "DIR="+dir, "TMPDIR="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	var hung []int
	for deadline := time.Now().Add(20 * time.Second); len(hung) < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the two hanging lines did not start (pids %v)", hung)
		}
		hung = readPIDs(t, filepath.Join(dir, "hung"))
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if exitCode(err) != 143 {
			t.Errorf("exit %v, want 143", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("e2e.sh still runs 20 s after SIGTERM")
	}
	for _, pid := range hung {
		for deadline := time.Now().Add(5 * time.Second); alive(pid); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("line process %d still runs after e2e.sh ended", pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
				break
			}
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "nri-sysctl-e2e-streams.*")); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
