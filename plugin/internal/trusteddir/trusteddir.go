// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package trusteddir gives tests a directory the plugin trusts a config
// in: when the test runs as root, one that, like every directory above
// it, is root's and not writable by group or others. t.TempDir will not
// do there: /tmp is mode 1777.
package trusteddir

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Dir returns a new trusted directory, removed when the test ends.
func Dir(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		return t.TempDir()
	}
	for _, base := range []string{"/run", "/var/lib"} {
		if !rootOnly("/") || !rootOnly(base) {
			continue
		}
		dir, err := os.MkdirTemp(base, "nri-sysctl-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	t.Fatal("found no root-owned directory that is not group/other-writable to test in (tried /run, /var/lib)")
	return ""
}

// WriteConfig writes text as config.yaml in a new trusted directory and
// returns its path.
func WriteConfig(t testing.TB, text string) string {
	t.Helper()
	path := filepath.Join(Dir(t), "config.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	// A file written moments ago is read only once it has held still
	// (config.Load's settle time); these are written once, not edited.
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	return path
}

func rootOnly(dir string) bool {
	var st syscall.Stat_t
	return syscall.Stat(dir, &st) == nil && st.Uid == 0 && st.Mode&0o022 == 0
}
