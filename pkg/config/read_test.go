// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package config

import (
	"golang.org/x/sys/unix"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// trustedDir returns a new directory that the trust walk accepts: it and
// every directory above it are root's and not writable by group or others.
// t.TempDir will not do: it is under /tmp, mode 1777.
func trustedDir(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the trust walk wants root-owned directories")
	}
	for _, base := range []string{"/run", "/var/lib"} {
		if !rootOnly(t, "/") || !rootOnly(t, base) {
			continue
		}
		dir, err := os.MkdirTemp(base, "nri-sysctl-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	t.Fatal("found no root-owned directory that is not group/other-writable to test in (tried /run, /var/lib)")
	return ""
}

func rootOnly(t *testing.T, dir string) bool {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return false
	}
	return st.Uid == 0 && st.Mode&0o022 == 0
}

// writeConfig writes a valid config with the given mode and owner,
// creating its directory.
func writeConfig(t *testing.T, path, text string, mode os.FileMode, uid int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, uid, 0); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

type loader func(string, KernelChecker) (*Config, error)

// loadWithin fails the test if a load takes 5 s, so that a regression to a
// blocking open or an endless read fails instead of hanging the run.
func loadWithin(t *testing.T, load loader, path string) (*Config, error) {
	t.Helper()
	type result struct {
		cfg *Config
		err error
	}
	done := make(chan result, 1)
	go func() {
		cfg, err := load(path, nil)
		done <- result{cfg, err}
	}()
	select {
	case r := <-done:
		return r.cfg, r.err
	case <-time.After(5 * time.Second):
		t.Fatalf("loading %s did not return within 5 s", path)
		return nil, nil
	}
}

const validConfig = "sysctls:\n  net.ipv4.tcp_keepalive_time: 600\n"

// Both loaders refuse, at once, anything but a regular file of at most
// MaxFileSize: a FIFO used to block forever, /dev/zero to be read forever.
func TestLoadRefusesAllButASmallRegularFile(t *testing.T) {
	// A valid config padded with a comment to exactly size bytes.
	padded := func(size int) string {
		return validConfig + "#" + strings.Repeat("x", size-len(validConfig)-2) + "\n"
	}
	file := func(size int) func(t *testing.T, dir string) string {
		return func(t *testing.T, dir string) string {
			path := dir + "/config.yaml"
			writeConfig(t, path, padded(size), 0o644, 0)
			return path
		}
	}
	tests := []struct {
		name string
		// setup returns the path to load, made under dir if need be.
		setup func(t *testing.T, dir string) string
		want  string // "" accepts
	}{
		{"FIFO", func(t *testing.T, dir string) string {
			if err := syscall.Mkfifo(dir+"/config.yaml", 0o600); err != nil {
				t.Fatal(err)
			}
			return dir + "/config.yaml"
		}, "it is a named pipe (FIFO), not a regular file"},
		{"/dev/zero", func(*testing.T, string) string { return "/dev/zero" }, "it is a character device, not a regular file"},
		{"directory", func(_ *testing.T, dir string) string { return dir }, "it is a directory, not a regular file"},
		{"socket", func(t *testing.T, dir string) string {
			l, err := net.Listen("unix", dir+"/config.yaml")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return dir + "/config.yaml"
		}, "it is a socket, not a regular file"},
		{"2 MB file", file(2_000_000), "file is larger than the 1048576-byte (1 MiB) limit"},
		{"1 MiB and a byte", file(MaxFileSize + 1), "file is larger than the 1048576-byte (1 MiB) limit"},
		{"exactly 1 MiB", file(MaxFileSize), ""},
	}
	for _, l := range []struct {
		name string
		load loader
	}{{"Load", Load}, {"LoadTrusted", LoadTrusted}} {
		for _, tt := range tests {
			t.Run(l.name+"/"+tt.name, func(t *testing.T) {
				path := tt.setup(t, trustedDir(t))
				cfg, err := loadWithin(t, l.load, path)
				if tt.want == "" {
					if err != nil || len(cfg.Sysctls) != 1 {
						t.Fatalf("refused: %v", err)
					}
					return
				}
				if err == nil {
					t.Fatal("accepted")
				}
				if msg := err.Error(); !strings.Contains(msg, tt.want) || !strings.Contains(msg, "\n  "+path) {
					t.Fatalf("error does not name %s and say %q:\n%v", path, tt.want, err)
				}
			})
		}
	}
}

// A huge file is refused after reading just past the limit, not read whole
// first: a 300 MB file used to take 1.5 GB of memory.
func TestLoadReadsNoMoreThanTheLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: 64 MiB of zeros that take no disk.
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = Load(path, nil)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "larger than the 1048576-byte (1 MiB) limit") {
		t.Fatalf("err = %v", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Fatalf("refusing a 64 MiB file allocated %d MiB", alloc>>20)
	}
}

// LoadTrusted accepts a config only if root alone could have changed it,
// its directories up to / or any symlink on the way.
func TestLoadTrusted(t *testing.T) {
	tests := []struct {
		name string
		// setup builds the case under base and returns the path to load.
		setup func(t *testing.T, base string) string
		wants []string // nil accepts
	}{
		{"root's file in root's directories", func(t *testing.T, base string) string {
			writeConfig(t, base+"/etc/config.yaml", validConfig, 0o644, 0)
			return base + "/etc/config.yaml"
		}, nil},
		{"relative path", func(t *testing.T, base string) string {
			writeConfig(t, base+"/etc/config.yaml", validConfig, 0o644, 0)
			t.Chdir(base)
			return "etc/./config.yaml"
		}, nil},
		{"dot-dot after a symlink leaves the symlink's target, as in the kernel", func(t *testing.T, base string) string {
			writeConfig(t, base+"/etc/config.yaml", validConfig, 0o644, 0)
			if err := os.Mkdir(base+"/etc/sub", 0o755); err != nil {
				t.Fatal(err)
			}
			symlink(t, "etc/sub", base+"/up")
			t.Chdir(base)
			return "up/../config.yaml"
		}, nil},
		{"Kubernetes ConfigMap symlink chain", func(t *testing.T, base string) string {
			dir := base + "/etc/nri-sysctl"
			writeConfig(t, dir+"/..2026_11_30_12_00_00.123456789/config.yaml", validConfig, 0o644, 0)
			symlink(t, "..2026_11_30_12_00_00.123456789", dir+"/..data")
			symlink(t, "..data/config.yaml", dir+"/config.yaml")
			return dir + "/config.yaml"
		}, nil},
		{"Kubernetes ConfigMap volume: a 0777 directory on a read-only mount", func(t *testing.T, base string) string {
			dir := base + "/etc/nri-sysctl"
			writeConfig(t, dir+"/..2026_11_30_12_00_00.123456789/config.yaml", validConfig, 0o644, 0)
			symlink(t, "..2026_11_30_12_00_00.123456789", dir+"/..data")
			symlink(t, "..data/config.yaml", dir+"/config.yaml")
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			readOnlyBindMount(t, dir)
			return dir + "/config.yaml"
		}, nil},
		{"group-writable directory", func(t *testing.T, base string) string {
			writeConfig(t, base+"/etc/config.yaml", validConfig, 0o644, 0)
			if err := os.Chmod(base+"/etc", 0o775); err != nil {
				t.Fatal(err)
			}
			return base + "/etc/config.yaml"
		}, []string{"directory BASE/etc is writable by group or others (mode 0775)", "fix with: chmod go-w BASE/etc"}},
		{"world-writable directory with the sticky bit, like /tmp", func(t *testing.T, base string) string {
			writeConfig(t, base+"/etc/config.yaml", validConfig, 0o644, 0)
			if err := os.Chmod(base+"/etc", 0o777|os.ModeSticky); err != nil {
				t.Fatal(err)
			}
			return base + "/etc/config.yaml"
		}, []string{"directory BASE/etc is writable by group or others (mode 1777)"}},
		{"directory owned by another user", func(t *testing.T, base string) string {
			writeConfig(t, base+"/etc/config.yaml", validConfig, 0o644, 0)
			if err := os.Chown(base+"/etc", 1000, 0); err != nil {
				t.Fatal(err)
			}
			return base + "/etc/config.yaml"
		}, []string{"directory BASE/etc is owned by uid 1000, not root", "fix with: chown root BASE/etc"}},
		{"symlink on the way owned by another user", func(t *testing.T, base string) string {
			writeConfig(t, base+"/etc/config.yaml", validConfig, 0o644, 0)
			symlink(t, "etc", base+"/link")
			if err := os.Lchown(base+"/link", 1000, 1000); err != nil {
				t.Fatal(err)
			}
			return base + "/link/config.yaml"
		}, []string{"symlink BASE/link (-> etc) is owned by uid 1000, not root", "fix with: chown -h root BASE/link"}},
		{"symlink to a file anyone can write", func(t *testing.T, base string) string {
			writeConfig(t, base+"/data/config.yaml", validConfig, 0o666, 0)
			symlink(t, base+"/data/config.yaml", base+"/config.yaml")
			return base + "/config.yaml"
		}, []string{"BASE/config.yaml -> BASE/data/config.yaml: config is writable by group or others (mode 0666)", "fix with: chmod go-w BASE/data/config.yaml"}},
		{"symlink into /tmp", func(t *testing.T, base string) string {
			target := filepath.Join(t.TempDir(), "config.yaml")
			writeConfig(t, target, validConfig, 0o600, 0)
			symlink(t, target, base+"/config.yaml")
			return base + "/config.yaml"
		}, []string{"directory /tmp is writable by group or others (mode 1777)"}},
		{"file owned by another user", func(t *testing.T, base string) string {
			writeConfig(t, base+"/config.yaml", validConfig, 0o644, 1000)
			return base + "/config.yaml"
		}, []string{"config is owned by uid 1000, not root", "fix with: chown root BASE/config.yaml"}},
		{"missing file", func(t *testing.T, base string) string {
			return base + "/none.yaml"
		}, []string{"cannot read config: lstat BASE/none.yaml: no such file or directory"}},
		{"symlink loop", func(t *testing.T, base string) string {
			symlink(t, "b", base+"/a")
			symlink(t, "a", base+"/b")
			return base + "/a"
		}, []string{"too many levels of symbolic links"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := trustedDir(t)
			path := tt.setup(t, base)
			cfg, err := loadWithin(t, LoadTrusted, path)
			if tt.wants == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if got := strings.Join(cfg.AllKeys(), ","); got != "net.ipv4.tcp_keepalive_time" {
					t.Fatalf("loaded %q", got)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), "\n  "+path) {
				t.Errorf("error does not start with the config path %s:\n%v", path, err)
			}
			for _, w := range tt.wants {
				if w = strings.ReplaceAll(w, "BASE", base); !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// The checks and the read go through one descriptor: a file swapped after
// the walk, for one anyone can write, is refused rather than read.
func TestLoadTrustedChecksWhatItReads(t *testing.T) {
	const evilConfig = "sysctls:\n  net.ipv4.tcp_keepalive_time: 1\n"
	tests := []struct {
		name string
		swap func(t *testing.T, path string)
		want string
	}{
		{"replaced by a file anyone can write", func(t *testing.T, path string) {
			evil := filepath.Dir(path) + "/evil.yaml"
			writeConfig(t, evil, evilConfig, 0o666, 0)
			if err := os.Rename(evil, path); err != nil {
				t.Error(err)
			}
		}, "config is writable by group or others (mode 0666)"},
		// The file it points to is root's and 0644, so only the open
		// refusing to follow it, then a new walk, catch /tmp.
		{"replaced by a symlink into /tmp", func(t *testing.T, path string) {
			evil := filepath.Join(t.TempDir(), "evil.yaml")
			writeConfig(t, evil, evilConfig, 0o644, 0)
			if err := os.Remove(path); err != nil {
				t.Error(err)
			}
			if err := os.Symlink(evil, path); err != nil {
				t.Error(err)
			}
		}, "directory /tmp is writable by group or others (mode 1777)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := trustedDir(t) + "/config.yaml"
			writeConfig(t, path, validConfig, 0o644, 0)
			swaps := 0
			beforeOpenHook = func() {
				if swaps++; swaps == 1 {
					tt.swap(t, path)
				}
			}
			defer func() { beforeOpenHook = nil }()
			cfg, err := LoadTrusted(path, nil)
			if err == nil {
				t.Fatalf("loaded the swapped-in file: %+v", cfg.Sysctls)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error lacks %q:\n%v", tt.want, err)
			}
		})
	}
}

// validate is run by image builders as any user: Load checks type and size
// but not ownership.
func TestLoadDoesNotCheckOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the file to another uid")
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	writeConfig(t, path, validConfig, 0o666, 1000)
	if _, err := Load(path, nil); err != nil {
		t.Fatalf("Load: %v", err)
	}
	if _, err := LoadTrusted(path, nil); err == nil {
		t.Fatal("LoadTrusted accepted a file anyone can write")
	}
}

// A file rewritten in place while it is loaded gives one of its whole
// versions or a clear error, never a mix of the two.
func TestLoadWhileFileChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	short := "sysctls:\n  net.ipv4.tcp_keepalive_time: 600\n"
	// The long version's keys sit at both ends, so a torn read shows.
	// Under MaxFileSize, so that a whole read of it loads.
	long := "sysctls:\n  net.ipv4.tcp_keepalive_intvl: 60\n" + strings.Repeat("  # padding padding padding padding padding padding\n", 12000) + "  net.ipv4.tcp_keepalive_probes: 5\n"
	if err := os.WriteFile(path, []byte(short), 0o600); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	// Stopped before the test ends, even when it fails, so that the
	// writer never reports after it.
	t.Cleanup(func() {
		close(stop)
		<-done
	})
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
			// Atomically, as docs/deploying.md asks: a new file renamed over
			// the old one. (An in-place rewrite read while it happens
			// is refused by the size and mtime checks; see
			// TestLoadRetriesAChangedFile. A writer that stops halfway
			// leaves a valid prefix that no reader can tell from a whole
			// file.)
			tmp := path + ".new"
			if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
				t.Error(err)
				return
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var whole, refused int
	for i := 0; i < 40; i++ {
		cfg, err := Load(path, nil)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			refused++
			continue
		}
		keys := strings.Join(cfg.AllKeys(), ",")
		if keys != "net.ipv4.tcp_keepalive_time" && keys != "net.ipv4.tcp_keepalive_intvl,net.ipv4.tcp_keepalive_probes" {
			t.Fatalf("loaded a mix of two versions: %s", keys)
		}
		whole++
	}
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

// readOnlyBindMount mounts dir read-only over itself until the test ends.
func readOnlyBindMount(t *testing.T, dir string) {
	t.Helper()
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("cannot bind-mount (needs root and a mount namespace that allows it): %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount %s read-only: %v", dir, err)
	}
}
