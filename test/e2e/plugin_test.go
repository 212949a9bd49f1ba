// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

// Running the nri-sysctl plugin as an external NRI plugin connected to the
// test containerd's NRI socket.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// readyLine is what the plugin logs once its stub has registered with NRI.
// It is used only to know when to go on, never as evidence of behaviour.
const readyLine = "registered with NRI"

type pluginProc struct {
	c       *cluster
	cmd     *exec.Cmd
	logPath string
	// configPath is the config file the plugin was started with (startPlugin).
	configPath string
	exited     chan struct{}
	waitErr    error
	// stoppedByTest is set when the test itself stopped the plugin, so
	// that its exit is not reported as a crash.
	stoppedByTest atomic.Bool
}

// pluginBinary returns the plugin binary, failing the test if it is missing.
func pluginBinary(t *testing.T) string {
	t.Helper()
	c := getCluster(t)
	if _, err := os.Stat(c.pluginBin); err != nil {
		t.Fatalf("plugin binary %s is missing: run `make build` (or set NRI_SYSCTL_BIN): %v", c.pluginBin, err)
	}
	return c.pluginBin
}

// writePluginConfig writes a plugin config file (mode 0600) and returns its path.
func writePluginConfig(t *testing.T, configYAML string) string {
	t.Helper()
	c := getCluster(t)
	path := filepath.Join(c.workDir, c.nextID("plugin-config")+".yaml")
	if err := os.WriteFile(path, []byte(configYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func pluginArgs(c *cluster, configPath string, extra []string) []string {
	args := []string{
		"--config", configPath,
		"--nri-socket", c.nriSock,
		"--containerd-address", c.grpcSock,
		"--containerd-namespace", k8sNamespace,
		"--log-level", "debug",
		// The run's own pod state, removed with its directory.
		"--pod-state-dir", filepath.Join(c.tmp, "pod-state"),
	}
	// E.g. NRI_SYSCTL_E2E_PLUGIN_ARGS="--mode namespace" runs every case in
	// another plugin mode.
	args = append(args, strings.Fields(os.Getenv("NRI_SYSCTL_E2E_PLUGIN_ARGS"))...)
	return append(args, extra...)
}

// startPlugin runs the plugin with configYAML and waits until it has
// registered with NRI. It is stopped when the test ends.
func startPlugin(t *testing.T, configYAML string, extraArgs ...string) *pluginProc {
	t.Helper()
	c := getCluster(t)
	cfg := writePluginConfig(t, configYAML)
	p := launchPlugin(t, nil, pluginArgs(c, cfg, extraArgs)...)
	p.configPath = cfg
	p.waitRegistered(t, 1, 20*time.Second)
	return p
}

// launchPlugin starts the plugin binary with args and, added to the test's
// environment, env; it does not wait for anything. The plugin is stopped
// when the test ends, and the test fails if it exited before that.
func launchPlugin(t *testing.T, env []string, args ...string) *pluginProc {
	t.Helper()
	c := getCluster(t)
	bin := pluginBinary(t)
	p := &pluginProc{c: c, logPath: filepath.Join(c.logDir, c.nextID("plugin")+".log"), exited: make(chan struct{})}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	if len(env) > 0 {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout = logFile
	p.cmd.Stderr = logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start plugin: %v", err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	c.mu.Lock()
	c.plugins[p] = true
	c.mu.Unlock()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- plugin log tail (%s) ---\n%s", p.logPath, tail(p.logPath, 80))
		}
		select {
		case <-p.exited:
			if !t.Failed() && !p.stoppedByTest.Load() {
				t.Errorf("plugin exited before the end of the test: %v\n%s", p.waitErr, tail(p.logPath, 40))
			}
		default:
		}
		p.stop()
	})
	return p
}

// waitRegistered waits until the plugin has logged its n-th registration
// with NRI (n > 1 after reconnects). The log line only says when to go on;
// it is never evidence of behaviour.
func (p *pluginProc) waitRegistered(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case <-p.exited:
			t.Fatalf("plugin exited before registering with NRI: %v\n--- plugin log ---\n%s", p.waitErr, tail(p.logPath, 80))
		case <-deadline:
			t.Fatalf("plugin did not log %q %d time(s) within %s\n--- plugin log ---\n%s", readyLine, n, timeout, tail(p.logPath, 80))
		case <-time.After(50 * time.Millisecond):
		}
		if data, err := os.ReadFile(p.logPath); err == nil && bytes.Count(data, []byte(readyLine)) >= n {
			var last string
			for _, line := range strings.Split(string(data), "\n") {
				if strings.Contains(line, readyLine) {
					last = line
				}
			}
			t.Logf("plugin ready: %s", strings.TrimSpace(last))
			return
		}
	}
}

// stop ends the plugin: SIGTERM, then SIGKILL after 10s.
func (p *pluginProc) stop() {
	p.stoppedByTest.Store(true)
	select {
	case <-p.exited:
	default:
		stopProcess(p.cmd.Process.Pid, p.exited, 10*time.Second)
	}
	p.c.mu.Lock()
	delete(p.c.plugins, p)
	p.c.mu.Unlock()
}

// running reports whether the plugin process is still alive.
func (p *pluginProc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// runPluginExpectExit runs the plugin with configYAML and returns its exit code
// and combined output. It fails the test if the plugin is still running after
// 20s (it is then killed).
func runPluginExpectExit(t *testing.T, configYAML string, extraArgs ...string) (int, string) {
	t.Helper()
	c := getCluster(t)
	bin := pluginBinary(t)
	cfg := writePluginConfig(t, configYAML)
	return runExpectExit(t, bin, pluginArgs(c, cfg, extraArgs)...)
}

// runExpectExit runs a command and returns its exit code and combined output.
func runExpectExit(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %s still running after 20s (killed); output:\n%s", bin, strings.Join(args, " "), out)
	}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exitErr):
		return exitErr.ExitCode(), string(out)
	default:
		t.Fatalf("run %s: %v", bin, err)
		return -1, ""
	}
}

// cpuTimeOf is the CPU time process pid has used, user and system, at the
// kernel's 10 ms resolution; 0 if it cannot be read.
func cpuTimeOf(pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// utime and stime, in clock ticks (100 per second), follow the
	// command name in parentheses.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(fields) <= 12 {
		return 0
	}
	ut, _ := strconv.Atoi(fields[11])
	st, _ := strconv.Atoi(fields[12])
	return time.Duration(ut+st) * 10 * time.Millisecond
}
