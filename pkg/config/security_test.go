package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckFileSecurity(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to own files as root and as another uid")
	}
	dir := t.TempDir()
	write := func(name string, mode os.FileMode, uid int) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("sysctls: {}\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, 0); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name  string
		mode  os.FileMode
		uid   int
		wants []string
	}{
		{"root 0600", 0o600, 0, nil},
		{"root 0644", 0o644, 0, nil},
		{"group-writable", 0o664, 0, []string{"writable by group or others (mode 0664)", "chmod go-w"}},
		{"world-writable", 0o606, 0, []string{"writable by group or others (mode 0606)"}},
		{"owned by another user", 0o600, 1234, []string{"owned by uid 1234, not root", "chown root"}},
		{"both", 0o666, 1234, []string{"mode 0666", "uid 1234"}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := write(strings.Repeat("c", i+1)+".yaml", tc.mode, tc.uid)
			err := CheckFileSecurity(p)
			if tc.wants == nil {
				if err != nil {
					t.Fatalf("unexpected: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("insecure config accepted")
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) || !strings.Contains(err.Error(), p) {
					t.Errorf("error %q lacks %q or the file name", err, w)
				}
			}
		})
	}
	if err := CheckFileSecurity(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("missing file: %v", err)
	}
}
