// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/plugin/internal/trusteddir"
)

func TestImportCRIO(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	importCRIO := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"import-crio"}, args...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}

	good := write("10-sysctls.conf", "[crio.runtime]\ndefault_sysctls = [\"net.ipv4.tcp_keepalive_time=600\", \"net/core/somaxconn=1024\"]\n")
	code, out, errOut := importCRIO(good)
	if code != 0 || errOut != "" {
		t.Fatalf("good drop-in: exit %d, stderr %q", code, errOut)
	}
	if !strings.Contains(out, "# in "+good+" by `nri-sysctl import-crio`.") || !strings.Contains(out, "  net.core.somaxconn: \"1024\"\n") {
		t.Errorf("stdout does not name the source or lacks a value:\n%s", out)
	}
	// What it prints is a config validate accepts.
	cfgPath := trusteddir.WriteConfig(t, out)
	var vout, verr bytes.Buffer
	if code := run([]string{"validate", "--skip-kernel-check", "--config", cfgPath}, &vout, &verr); code != 0 {
		t.Errorf("validate of the imported config: exit %d\n%s", code, verr.String())
	}

	bad := write("crio.conf", "[crio.runtime]\ndefault_sysctls = [\n  \"net.core.somaxconn=1024\",\n  \"kernel.core_pattern=core\",\n]\n")
	code, out, errOut = importCRIO(bad)
	if code != 1 {
		t.Errorf("entry left out: exit %d, want 1", code)
	}
	if want := "left out: " + bad + ":4: default_sysctls[1] \"kernel.core_pattern=core\": kernel.core_pattern is not namespaced"; !strings.Contains(errOut, want) {
		t.Errorf("stderr lacks %q:\n%s", want, errOut)
	}
	if !strings.Contains(out, "  net.core.somaxconn: \"1024\"\n  # left out: ") {
		t.Errorf("stdout lacks the good value followed by the left-out comment:\n%s", out)
	}

	notTOML := write("config.yaml", "sysctls:\n  net.core.somaxconn: 1\n")
	if code, out, errOut := importCRIO(notTOML); code != 1 || out != "" || !strings.Contains(errOut, "not a CRI-O config") {
		t.Errorf("YAML file: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := importCRIO(filepath.Join(dir, "missing.conf")); code != 1 || !strings.Contains(errOut, "no such file") {
		t.Errorf("missing file: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := importCRIO(dir); code != 1 || !strings.Contains(errOut, "not a regular file") {
		t.Errorf("directory: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := importCRIO(); code != 2 || !strings.Contains(errOut, "Usage: nri-sysctl import-crio PATH") {
		t.Errorf("no PATH: exit %d, stderr %q", code, errOut)
	}
}

// A FIFO given as PATH fails at once: a blocking open would wait for a
// writer that never comes.
func TestImportCRIORefusesFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "crio.conf")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		var stdout, stderr bytes.Buffer
		code := run([]string{"import-crio", fifo}, &stdout, &stderr)
		done <- result{code, stderr.String()}
	}()
	select {
	case r := <-done:
		if r.code != 1 || !strings.Contains(r.stderr, "not a regular file") {
			t.Fatalf("import-crio FIFO: exit %d, stderr %q; want 1 and a not-a-regular-file error", r.code, r.stderr)
		}
	case <-time.After(time.Second):
		// Unblock the open so the goroutine ends with the test.
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		t.Fatal("import-crio on a FIFO still running after 1s")
	}
}
