// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package install checks what `make install` lays out for a node image, and
// that the systemd units it installs pass `systemd-analyze verify`. It needs
// make, go and systemd-analyze, but no containerd and no root.
package install

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Clean(filepath.Join(wd, "..", ".."))
	if _, err := os.Stat(filepath.Join(root, "Makefile")); err != nil {
		t.Fatalf("no Makefile at %s: %v", root, err)
	}
	return root
}

// makeInstall runs `make install DESTDIR=<temp> PREFIX=prefix` in the repo and
// returns DESTDIR.
func makeInstall(t *testing.T, prefix string) string {
	t.Helper()
	destdir := t.TempDir()
	args := []string{"--no-print-directory", "install", "DESTDIR=" + destdir}
	if prefix != "" {
		args = append(args, "PREFIX="+prefix)
	}
	cmd := exec.Command("make", args...)
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("make %s: ok", strings.Join(args, " "))
	return destdir
}

// tree lists every regular file below dir with its permission bits.
func tree(t *testing.T, dir string) map[string]fs.FileMode {
	t.Helper()
	files := map[string]fs.FileMode{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			t.Errorf("%s is not a regular file (%s)", path, info.Mode())
		}
		files["/"+filepath.ToSlash(strings.TrimPrefix(path, dir+"/"))] = info.Mode().Perm()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// expectedTree is the layout docs/deploying.md ("Baking it into a node image")
// documents, with each file's mode.
func expectedTree(t *testing.T, root, prefix string) map[string]fs.FileMode {
	t.Helper()
	want := map[string]fs.FileMode{
		prefix + "/bin/nri-sysctl":                      0o755,
		"/etc/nri-sysctl/config.yaml":                   0o600,
		"/etc/systemd/system/nri-sysctl.service":        0o644,
		"/etc/systemd/system/nri-sysctl-reload.path":    0o644,
		"/etc/systemd/system/nri-sysctl-reload.service": 0o644,
		prefix + "/share/doc/nri-sysctl/README.md":      0o644,
		prefix + "/share/doc/nri-sysctl/CHANGELOG.md":   0o644,
		prefix + "/share/doc/nri-sysctl/nri-sysctl.txt": 0o644,
		// The licence and the third-party notices (make notices).
		prefix + "/share/doc/nri-sysctl/LICENSE":             0o644,
		prefix + "/share/doc/nri-sysctl/THIRD_PARTY_NOTICES": 0o644,
		// The drop-in that turns metrics on; not enabled by install.
		prefix + "/share/nri-sysctl/systemd/metrics.conf": 0o644,
	}
	drops, err := filepath.Glob(filepath.Join(root, "config", "containerd", "*.toml"))
	if err != nil || len(drops) == 0 {
		t.Fatalf("no config/containerd/*.toml in %s: %v", root, err)
	}
	for _, d := range drops {
		want[prefix+"/share/nri-sysctl/containerd/"+filepath.Base(d)] = 0o644
	}
	// The docs pages beside the README, so that its links resolve there.
	for _, d := range docsPages(t, root) {
		want[prefix+"/share/doc/nri-sysctl/docs/"+filepath.Base(d)] = 0o644
	}
	return want
}

func TestMakeInstall(t *testing.T) {
	root := repoRoot(t)
	for _, tc := range []struct {
		name, prefix, want string
	}{
		{"PREFIX=/usr", "/usr", "/usr"},
		{"default PREFIX", "", "/usr/local"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			destdir := makeInstall(t, tc.prefix)
			got := tree(t, destdir)
			want := expectedTree(t, root, tc.want)

			var paths []string
			for p := range want {
				paths = append(paths, p)
			}
			for p := range got {
				if _, ok := want[p]; !ok {
					paths = append(paths, p)
				}
			}
			sort.Strings(paths)
			for _, p := range paths {
				g, have := got[p]
				w, expected := want[p]
				switch {
				case !have:
					t.Errorf("missing %s", p)
				case !expected:
					t.Errorf("unexpected file %s (mode %04o): not in the documented layout", p, g)
				case g != w:
					t.Errorf("%s: mode %04o, want %04o", p, g, w)
				}
			}

			// Installed copies match the repository's.
			same := map[string]string{
				"/etc/nri-sysctl/config.yaml":                   "config/config.yaml",
				"/etc/systemd/system/nri-sysctl-reload.path":    "systemd/nri-sysctl-reload.path",
				"/etc/systemd/system/nri-sysctl-reload.service": "systemd/nri-sysctl-reload.service",
				tc.want + "/share/doc/nri-sysctl/README.md":     "README.md",
				tc.want + "/share/doc/nri-sysctl/CHANGELOG.md":  "CHANGELOG.md",
			}
			for p := range want {
				if strings.HasPrefix(p, tc.want+"/share/nri-sysctl/containerd/") {
					same[p] = "config/containerd/" + filepath.Base(p)
				}
				if strings.HasPrefix(p, tc.want+"/share/doc/nri-sysctl/docs/") {
					same[p] = "docs/" + filepath.Base(p)
				}
			}
			for installed, src := range same {
				a := readFile(t, filepath.Join(destdir, installed))
				b := readFile(t, filepath.Join(root, src))
				if !bytes.Equal(a, b) {
					t.Errorf("%s differs from %s", installed, src)
				}
			}

			// The installed service runs the installed binary, and only it.
			bin := tc.want + "/bin/nri-sysctl"
			unit := string(readFile(t, filepath.Join(destdir, "etc/systemd/system/nri-sysctl.service")))
			execLines := 0
			for _, line := range strings.Split(unit, "\n") {
				k, v, ok := strings.Cut(line, "=")
				if !ok || !strings.HasPrefix(k, "ExecStart") {
					continue
				}
				execLines++
				if f := strings.Fields(v); len(f) == 0 || f[0] != bin {
					t.Errorf("installed unit: %s runs %q, want %s", k, v, bin)
				}
			}
			if execLines != 2 {
				t.Errorf("installed unit has %d ExecStart/ExecStartPre lines, want 2:\n%s", execLines, unit)
			}
			if tc.want != "/usr/local" && strings.Contains(unit, "/usr/local/bin/nri-sysctl") {
				t.Errorf("installed unit still names /usr/local/bin/nri-sysctl:\n%s", unit)
			}
			// The rest of the unit is the repository's.
			src := strings.ReplaceAll(string(readFile(t, filepath.Join(root, "systemd/nri-sysctl.service"))), "/usr/local/bin/nri-sysctl", bin)
			if unit != src {
				t.Errorf("installed nri-sysctl.service differs from systemd/nri-sysctl.service beyond the binary path")
			}
			dropIn := string(readFile(t, filepath.Join(destdir, tc.want, "share/nri-sysctl/systemd/metrics.conf")))
			if want := strings.ReplaceAll(string(readFile(t, filepath.Join(root, "config/systemd/metrics.conf"))), "/usr/local/bin/nri-sysctl", bin); dropIn != want {
				t.Errorf("installed metrics.conf differs from config/systemd/metrics.conf beyond the binary path:\n%s", dropIn)
			}

			// The installed binary accepts the installed config without a
			// kernel probe (the image build's kernel is not the node's).
			installedBin := filepath.Join(destdir, bin)
			cfg := filepath.Join(destdir, "etc/nri-sysctl/config.yaml")
			out, err := exec.Command(installedBin, "validate", "--skip-kernel-check", "--config", cfg).CombinedOutput()
			if err != nil {
				t.Errorf("%s validate --skip-kernel-check --config %s: %v\n%s", installedBin, cfg, err, out)
			} else {
				t.Logf("installed binary: %s", strings.TrimSpace(string(out)))
			}
			if out, err := exec.Command(installedBin, "version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "nri-sysctl ") {
				t.Errorf("%s version: %v %q", installedBin, err, out)
			}
			help := string(readFile(t, filepath.Join(destdir, tc.want, "share/doc/nri-sysctl/nri-sysctl.txt")))
			if !strings.Contains(help, "Usage:") || !strings.Contains(help, "--config") {
				t.Errorf("nri-sysctl.txt is not the --help text:\n%s", help)
			}
		})
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// verify runs `systemd-analyze verify` on units and returns its exit error
// and output. Any output at all (warnings included) counts as a finding.
func verify(t *testing.T, units ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("systemd-analyze", append([]string{"verify", "--man=no"}, units...)...)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// TestSystemdVerify runs `systemd-analyze verify` on the units `make install`
// lays out. verify insists that every Exec binary exists on this machine,
// and a node image's /usr/bin/nri-sysctl is not installed here, so the
// units are copied with the binary's path pointed into DESTDIR (the only
// change). `--root=DESTDIR` does not work for this: systemd 252 then looks
// for sysinit.target, /bin/kill and /bin/systemctl inside DESTDIR too.
func TestSystemdVerify(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Fatalf("systemd-analyze not found: install Debian's systemd package (test/setup.sh does): %v", err)
	}
	destdir := makeInstall(t, "/usr")
	bin := filepath.Join(destdir, "usr/bin/nri-sysctl")
	dir := t.TempDir()
	var units []string
	for _, name := range []string{"nri-sysctl.service", "nri-sysctl-reload.path", "nri-sysctl-reload.service"} {
		text := strings.ReplaceAll(string(readFile(t, filepath.Join(destdir, "etc/systemd/system", name))), "/usr/bin/nri-sysctl", bin)
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		units = append(units, path)
	}
	out, err := verify(t, units...)
	if err != nil || out != "" {
		t.Fatalf("systemd-analyze verify %s: %v\n%s", strings.Join(units, " "), err, out)
	}
	t.Logf("systemd-analyze verify: no findings on %d units", len(units))

	// With the metrics drop-in (metrics.conf) in the unit's .d directory:
	// still clean, and the merged unit may open TCP sockets, which the
	// shipped unit alone may not.
	dropInDir := filepath.Join(dir, "nri-sysctl.service.d")
	if err := os.Mkdir(dropInDir, 0o755); err != nil {
		t.Fatal(err)
	}
	canUseTCP := func() bool {
		t.Helper()
		cmd := exec.Command("systemd-analyze", "security", "--offline=yes", units[0])
		cmd.Dir = "/"
		out, _ := cmd.CombinedOutput()
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "RestrictAddressFamilies=~AF_(INET|INET6)") {
				return strings.HasPrefix(strings.TrimSpace(line), "✗")
			}
		}
		t.Fatalf("systemd-analyze security says nothing of AF_INET:\n%s", out)
		return false
	}
	if canUseTCP() {
		t.Fatal("the shipped unit may open TCP sockets: metrics should need the drop-in")
	}
	dropIn := strings.ReplaceAll(string(readFile(t, filepath.Join(destdir, "usr/share/nri-sysctl/systemd/metrics.conf"))), "/usr/bin/nri-sysctl", bin)
	if err := os.WriteFile(filepath.Join(dropInDir, "metrics.conf"), []byte(dropIn), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := verify(t, units[0]); err != nil || out != "" {
		t.Fatalf("systemd-analyze verify with the metrics drop-in: %v\n%s", err, out)
	}
	if !canUseTCP() {
		t.Fatal("with the metrics drop-in the unit still may not open TCP sockets: the listener would fail")
	}
	t.Logf("metrics drop-in: verify clean, TCP allowed only with it")

	// Control: verify does catch mistakes in this setting.
	bad := filepath.Join(t.TempDir(), "nri-sysctl.service")
	text := strings.Replace(string(readFile(t, units[0])), "Type=notify", "Type=notfy", 1)
	if err := os.WriteFile(bad, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := verify(t, bad); err == nil && out == "" {
		t.Fatalf("systemd-analyze verify found nothing wrong with Type=notfy: the check above proves nothing")
	} else {
		t.Logf("control (Type=notfy) caught: %s", firstLine(out))
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// TestUnitLeavesWhatThePluginNeeds guards the hardening of the shipped unit
// against settings that break the plugin without systemd-analyze noticing:
// ProtectHostname and ProtectKernelTunables make /proc/sys (or its
// hostname/domainname files) read-only, so namespace mode could never
// write kernel.domainname; a namespace or capability the plugin uses must
// stay allowed. The real run of the unit is the VM test.
func TestUnitLeavesWhatThePluginNeeds(t *testing.T) {
	unit := readUnit(t, filepath.Join(repoRoot(t), "systemd", "nri-sysctl.service"))
	for _, setting := range []string{"ProtectHostname", "ProtectKernelTunables"} {
		if v, ok := unit[setting]; ok && v != "no" && v != "false" {
			t.Errorf("%s=%s makes /proc/sys read-only for the plugin: namespace mode cannot write pods' sysctls (kernel.domainname)", setting, v)
		}
	}
	for setting, needed := range map[string][]string{
		"RestrictNamespaces":      {"net", "ipc", "uts", "user"},
		"CapabilityBoundingSet":   {"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_SYS_PTRACE", "CAP_SETUID", "CAP_SETGID"},
		"RestrictAddressFamilies": {"AF_UNIX"},
	} {
		have := strings.Fields(unit[setting])
		for _, n := range needed {
			if _, ok := unit[setting]; ok && !slices.Contains(have, n) {
				t.Errorf("%s=%s lacks %s, which the plugin needs", setting, unit[setting], n)
			}
		}
	}
	// SystemCallFilter may be repeated: the first line sets the kind (a
	// "~" deny list here), later allow lines take calls back out of it.
	filters := unitValues(t, filepath.Join(repoRoot(t), "systemd", "nri-sysctl.service"), "SystemCallFilter")
	if len(filters) == 0 {
		return
	}
	denied, allowed := filters[0], strings.Join(filters[1:], " ")
	if strings.Contains(denied, "@process") || strings.Contains(denied, "setns") || strings.Contains(denied, "unshare") {
		t.Errorf("SystemCallFilter=%s blocks setns/unshare, which the plugin needs", denied)
	}
	// The worker and a reload's checks lower their threads' priority: a
	// denied setpriority kills the plugin (SIGSYS) as it starts.
	if strings.Contains(denied, "@resources") && !slices.Contains(strings.Fields(allowed), "setpriority") {
		t.Errorf("SystemCallFilter=%s denies setpriority (in @resources) and no later SystemCallFilter= allows it back: the plugin is killed as it starts", denied)
	}
}

// unitValues is every value of key in the unit's lines, in order.
func unitValues(t *testing.T, path, key string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && strings.TrimSpace(k) == key {
			out = append(out, strings.TrimSpace(v))
		}
	}
	return out
}

// readUnit reads a unit's Key=Value lines; a repeated key keeps the last.
func readUnit(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

// docsPages lists docs/*.md, which make install puts beside the README.
func docsPages(t *testing.T, root string) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no docs/*.md in %s: %v", root, err)
	}
	return pages
}
