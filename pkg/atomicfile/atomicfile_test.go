// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// writers are both ways of replacing a file; each test runs on both.
var writers = map[string]func(string, []byte, os.FileMode) error{
	"Write":         Write,
	"WriteVolatile": WriteVolatile,
}

func TestWriteReplacesTheFile(t *testing.T) {
	for name, write := range writers {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			for _, text := range []string{"old", "new"} {
				if err := write(path, []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(path)
				if err != nil || string(got) != text {
					t.Fatalf("after writing %q: %q, %v", text, got, err)
				}
			}
			info, err := os.Stat(path)
			if err != nil || info.Mode().Perm() != 0o600 {
				t.Errorf("mode %v (%v), want 0600", info.Mode(), err)
			}
		})
	}
}

// A failed write leaves the old copy whole and no temporary file.
func TestFailedWriteLeavesNoTemporaryFile(t *testing.T) {
	for name, write := range writers {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "kept.yaml")
			if err := write(path, []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			// The rename fails: path is now a non-empty directory.
			os.Remove(path)
			os.MkdirAll(filepath.Join(path, "x"), 0o700)
			if err := write(path, []byte("new"), 0o600); err == nil {
				t.Fatal("writing over a directory succeeded")
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Errorf("left %d entries, want only the directory", len(entries))
			}
		})
	}
}
