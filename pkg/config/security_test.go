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

// A file rewritten in place while it is loaded gives one of its whole
// versions or a clear error, never a mix of the two.
func TestLoadWhileFileChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	short := "sysctls:\n  net.ipv4.tcp_keepalive_time: 600\n"
	// The long version's keys sit at both ends, so a torn read shows.
	long := "sysctls:\n  net.ipv4.tcp_keepalive_intvl: 60\n" + strings.Repeat("  # padding padding padding padding padding padding\n", 40000) + "  net.ipv4.tcp_keepalive_probes: 5\n"
	if err := os.WriteFile(path, []byte(short), 0o600); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			text := short
			if i%2 == 1 {
				text = long
			}
			// In place, not atomically: truncate, then write in two parts.
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				t.Error(err)
				return
			}
			for start := 0; start < len(text); start += 4096 {
				f.WriteString(text[start:min(start+4096, len(text))])
			}
			f.Close()
		}
	}()
	var whole, refused int
	for i := 0; i < 100; i++ {
		cfg, err := Load(path, nil)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			refused++
			continue
		}
		keys := strings.Join(cfg.AllKeys(), ",")
		if keys != "net.ipv4.tcp_keepalive_time" && keys != "net.ipv4.tcp_keepalive_intvl,net.ipv4.tcp_keepalive_probes" && keys != "" {
			t.Fatalf("loaded a mix of two versions: %s", keys)
		}
		whole++
	}
	close(stop)
	<-done
	t.Logf("%d loads gave a whole version, %d were refused", whole, refused)
}

// The change check itself, made deterministic: the file is rewritten right
// after each read until the hook stops.
func TestLoadRetriesAChangedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	v1 := "sysctls:\n  net.ipv4.tcp_keepalive_time: 600\n"
	v2 := "sysctls:\n  net.ipv4.tcp_keepalive_time: 300\n  net.ipv4.tcp_keepalive_intvl: 60\n"
	if err := os.WriteFile(path, []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	changes := 2
	afterReadHook = func() {
		if changes > 0 {
			changes--
			os.WriteFile(path, []byte(v2), 0o600)
		}
	}
	defer func() { afterReadHook = nil }()
	cfg, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.AllKeys(), ","); got != "net.ipv4.tcp_keepalive_intvl,net.ipv4.tcp_keepalive_time" {
		t.Fatalf("loaded %s: the read that raced a change was kept", got)
	}

	// A file that never holds still is refused, naming the file.
	afterReadHook = func() { os.WriteFile(path, []byte(v1+"# "+strings.Repeat("x", changes)+"\n"), 0o600); changes++ }
	if _, err := Load(path, nil); err == nil || !strings.Contains(err.Error(), path+": cannot read config: file kept changing while being read") {
		t.Fatalf("err = %v", err)
	}
}
