// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rpmutils "github.com/sassoftware/go-rpmutils"
)

// testBinaries builds a tiny static program per architecture, as
// <dir>/<arch>/nri-sysctl: the packages must carry each one unchanged.
func testBinaries(t *testing.T, arches ...string) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"go.mod":  "module tiny\n\ngo 1.22\n",
		"main.go": "package main\n\nfunc main() {}\n",
	} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, arch := range arches {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, "bin", arch, "nri-sysctl"), ".")
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build GOARCH=%s: %v\n%s", arch, err, out)
		}
	}
	return filepath.Join(dir, "bin")
}

// entry is one file as a package holds it.
type entry struct {
	mode     os.FileMode // permission bits
	dir      bool
	conffile bool // deb conffiles / rpm %config(noreplace)
	data     []byte
}

type pkg struct {
	arch, version string
	files         map[string]entry
	scripts       map[string]string // postinst/prerm/postrm (deb), post/preun/postun (rpm)
}

func TestPackagesContents(t *testing.T) {
	bins := testBinaries(t, "amd64", "arm64")
	out := t.TempDir()
	written, err := build(options{repo: "../..", binDir: bins, out: out, debVersion: "0.3.0~rc.1", rpmVersion: "0.3.0~rc.1",
		arches: []string{"amd64", "arm64"}, formats: []string{"deb", "rpm"}, mtime: time.Unix(1700000000, 0)})
	if err != nil {
		t.Fatal(err)
	}
	wantNames := []string{"nri-sysctl_0.3.0~rc.1_amd64.deb", "nri-sysctl_0.3.0~rc.1_arm64.deb",
		"nri-sysctl-0.3.0~rc.1-1.x86_64.rpm", "nri-sysctl-0.3.0~rc.1-1.aarch64.rpm"}
	if len(written) != len(wantNames) {
		t.Fatalf("wrote %v, want %v", written, wantNames)
	}
	for i, w := range wantNames {
		if filepath.Base(written[i]) != w {
			t.Errorf("package %d is %s, want %s", i, filepath.Base(written[i]), w)
		}
	}
	dropIns, _ := filepath.Glob("../../config/containerd/*.toml")
	if len(dropIns) == 0 {
		t.Fatal("no containerd drop-ins in config/containerd")
	}
	for _, path := range written {
		format := strings.TrimPrefix(filepath.Ext(path), ".")
		t.Run(filepath.Base(path), func(t *testing.T) {
			var p *pkg
			var err error
			if format == "deb" {
				p, err = readDeb(path)
			} else {
				p, err = readRPM(path)
			}
			if err != nil {
				t.Fatal(err)
			}
			goarch := "amd64"
			if strings.Contains(path, "arm64") || strings.Contains(path, "aarch64") {
				goarch = "arm64"
			}
			wantArch := map[string]map[string]string{"deb": {"amd64": "amd64", "arm64": "arm64"}, "rpm": {"amd64": "x86_64", "arm64": "aarch64"}}[format][goarch]
			if p.arch != wantArch {
				t.Errorf("architecture %q, want %q", p.arch, wantArch)
			}
			if p.version != "0.3.0~rc.1" {
				t.Errorf("version %q, want 0.3.0~rc.1", p.version)
			}
			bin, _ := os.ReadFile(filepath.Join(bins, goarch, "nri-sysctl"))
			units := unitDir[format]
			want := map[string]os.FileMode{
				"/usr/bin/nri-sysctl":                           0o755,
				units + "/nri-sysctl.service":                   0o644,
				units + "/nri-sysctl-reload.path":               0o644,
				units + "/nri-sysctl-reload.service":            0o644,
				"/etc/nri-sysctl/config.yaml":                   0o600,
				"/usr/share/nri-sysctl/systemd/metrics.conf":    0o644,
				"/usr/share/man/man8/nri-sysctl.8.gz":           0o644,
				"/usr/share/doc/nri-sysctl/README.md":           0o644,
				"/usr/share/doc/nri-sysctl/THIRD_PARTY_NOTICES": 0o644,
				"/usr/share/nri-sysctl/containerd/10-nri.toml":  0o644,
			}
			for _, d := range dropIns {
				want["/usr/share/nri-sysctl/containerd/"+filepath.Base(d)] = 0o644
			}
			if format == "deb" {
				want["/usr/share/doc/nri-sysctl/copyright"] = 0o644
				want["/usr/share/doc/nri-sysctl/changelog.gz"] = 0o644
				want["/usr/share/lintian/overrides/nri-sysctl"] = 0o644
			} else {
				want["/usr/lib/systemd/system-preset/80-nri-sysctl.preset"] = 0o644
				want["/usr/share/doc/nri-sysctl/LICENSE"] = 0o644
			}
			for path, mode := range want {
				e, ok := p.files[path]
				if !ok {
					t.Errorf("no %s", path)
					continue
				}
				if e.mode != mode {
					t.Errorf("%s: mode %o, want %o", path, e.mode, mode)
				}
				if e.conffile != (path == configPath) {
					t.Errorf("%s: conffile %v, want %v", path, e.conffile, path == configPath)
				}
			}
			for path, e := range p.files {
				if strings.HasPrefix(path, "/etc/systemd/") || strings.HasPrefix(path, "/usr/local/") {
					t.Errorf("%s: packages keep out of the admin's /etc/systemd and /usr/local", path)
				}
				if e.dir || !strings.HasPrefix(path, "/etc/") {
					continue
				}
				if path != configPath {
					t.Errorf("%s: only the config belongs in /etc", path)
				}
			}
			if !bytes.Equal(p.files[binaryPath].data, bin) {
				t.Errorf("%s is not the %s binary it was given", binaryPath, goarch)
			}
			shipped, _ := os.ReadFile("../../config/config.yaml")
			if !bytes.Equal(p.files[configPath].data, shipped) {
				t.Errorf("%s differs from config/config.yaml", configPath)
			}
			// Every binary path in the units and the drop-in is the package's.
			for _, path := range []string{units + "/nri-sysctl.service", "/usr/share/nri-sysctl/systemd/metrics.conf"} {
				text := string(p.files[path].data)
				if strings.Contains(text, installedBinary) || !strings.Contains(text, "ExecStart="+binaryPath+" ") {
					t.Errorf("%s does not run %s:\n%s", path, binaryPath, grepLines(text, "Exec"))
				}
			}
			checkScripts(t, format, p.scripts)
		})
	}
}

// checkScripts: each script exists, validates the installed config
// before any (re)start, and removal drops the enablement (kubelet's
// requirement) before stopping the plugin.
func checkScripts(t *testing.T, format string, s map[string]string) {
	t.Helper()
	names := map[string][3]string{"deb": {"postinst", "prerm", "postrm"}, "rpm": {"post", "preun", "postun"}}[format]
	for _, n := range names {
		if !strings.HasPrefix(s[n], "#!/bin/sh\n") {
			t.Errorf("%s script %s missing or not /bin/sh (%d bytes)", format, n, len(s[n]))
		}
		// Syntax only (sh -n runs nothing).
		cmd := exec.Command("sh", "-n")
		cmd.Stdin = strings.NewReader(s[n])
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s script %s: sh -n: %v\n%s", format, n, err, out)
		}
	}
	post, preun, postun := s[names[0]], s[names[1]], s[names[2]]
	validate := "validate --skip-kernel-check --config"
	before := func(script, first, then string) {
		t.Helper()
		i, j := strings.Index(script, first), strings.Index(script, then)
		if i < 0 || j < 0 || i > j {
			t.Errorf("%s: want %q before %q:\n%s", format, first, then, script)
		}
	}
	switch format {
	case "deb":
		before(post, validate, "deb-systemd-helper enable")
		before(post, "deb-systemd-helper enable", "deb-systemd-invoke restart nri-sysctl.service")
		before(preun, "deb-systemd-helper purge", "daemon-reload")
		before(preun, "daemon-reload", "deb-systemd-invoke stop")
		if !strings.Contains(postun, "deb-systemd-helper purge") {
			t.Errorf("deb postrm does not purge deb-systemd-helper's state:\n%s", postun)
		}
	case "rpm":
		before(post, validate, "preset nri-sysctl.service")
		before(preun, "disable nri-sysctl.service", "daemon-reload")
		before(preun, "daemon-reload", "stop nri-sysctl-reload.path nri-sysctl.service")
		before(postun, validate, "try-restart nri-sysctl.service")
	}
}

func grepLines(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestRefusesABinaryOfAnotherArchitecture(t *testing.T) {
	bins := testBinaries(t, "amd64")
	// The amd64 binary where the arm64 one belongs.
	if err := os.MkdirAll(filepath.Join(bins, "arm64"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(bins, "amd64", "nri-sysctl"))
	if err := os.WriteFile(filepath.Join(bins, "arm64", "nri-sysctl"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := build(options{repo: "../..", binDir: bins, out: t.TempDir(), debVersion: "0.3.0", rpmVersion: "0.3.0",
		arches: []string{"arm64"}, formats: []string{"deb"}})
	if err == nil || !strings.Contains(err.Error(), "not arm64") {
		t.Fatalf("want an error naming the wrong architecture, got %v", err)
	}
}

func TestOtherShippedConfigAndNonNativeChangelog(t *testing.T) {
	bins := testBinaries(t, "amd64")
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("sysctls: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	written, err := build(options{repo: "../..", binDir: bins, out: out, debVersion: "0.3.0-2", rpmVersion: "0.3.0",
		arches: []string{"amd64"}, formats: []string{"deb"}, config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	p, err := readDeb(written[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := string(p.files[configPath].data); got != "sysctls: {}\n" {
		t.Errorf("-config: %s holds %q", configPath, got)
	}
	// A version with a Debian revision is not native: changelog.Debian.gz.
	cl, ok := p.files["/usr/share/doc/nri-sysctl/changelog.Debian.gz"]
	if !ok {
		t.Fatalf("no changelog.Debian.gz for version 0.3.0-2")
	}
	zr, err := gzip.NewReader(bytes.NewReader(cl.data))
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(zr)
	if !strings.HasPrefix(string(text), "nri-sysctl (0.3.0-2) ") {
		t.Errorf("changelog's first line: %q", strings.SplitN(string(text), "\n", 2)[0])
	}
}

// readDeb reads a .deb: an ar archive of debian-binary, control.tar.gz
// and data.tar.gz.
func readDeb(path string) (*pkg, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	members, err := readAr(data)
	if err != nil {
		return nil, err
	}
	control, err := readTarGz(members["control.tar.gz"])
	if err != nil {
		return nil, fmt.Errorf("control.tar.gz: %w", err)
	}
	files, err := readTarGz(members["data.tar.gz"])
	if err != nil {
		return nil, fmt.Errorf("data.tar.gz: %w", err)
	}
	p := &pkg{files: files, scripts: map[string]string{}}
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		p.scripts[s] = string(control["/"+s].data)
	}
	sc := bufio.NewScanner(bytes.NewReader(control["/control"].data))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ": "); ok {
			switch k {
			case "Architecture":
				p.arch = v
			case "Version":
				p.version = v
			}
		}
	}
	for _, c := range strings.Fields(string(control["/conffiles"].data)) {
		e := p.files[c]
		e.conffile = true
		p.files[c] = e
	}
	return p, nil
}

func readAr(data []byte) (map[string][]byte, error) {
	if !bytes.HasPrefix(data, []byte("!<arch>\n")) {
		return nil, errors.New("not an ar archive")
	}
	members := map[string][]byte{}
	for off := 8; off+60 <= len(data); {
		hdr := data[off : off+60]
		name := strings.TrimSuffix(strings.TrimSpace(string(hdr[0:16])), "/")
		size, err := strconv.Atoi(strings.TrimSpace(string(hdr[48:58])))
		if err != nil || off+60+size > len(data) {
			return nil, fmt.Errorf("ar member %q: bad size", name)
		}
		members[name] = data[off+60 : off+60+size]
		off += 60 + size + size%2
	}
	return members, nil
}

func readTarGz(data []byte) (map[string]entry, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	files := map[string]entry{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		name := "/" + strings.TrimPrefix(strings.TrimSuffix(h.Name, "/"), "./")
		files[name] = entry{mode: os.FileMode(h.Mode).Perm(), dir: h.Typeflag == tar.TypeDir, data: body}
	}
}

func readRPM(path string) (*pkg, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := rpmutils.ReadRpm(f)
	if err != nil {
		return nil, err
	}
	p := &pkg{files: map[string]entry{}, scripts: map[string]string{}}
	p.arch, _ = r.Header.GetString(rpmutils.ARCH)
	ver, _ := r.Header.GetString(rpmutils.VERSION)
	p.version = ver
	for tag, name := range map[int]string{rpmutils.POSTIN: "post", rpmutils.PREUN: "preun", rpmutils.POSTUN: "postun"} {
		p.scripts[name], _ = r.Header.GetString(tag)
	}
	infos, err := r.Header.GetFiles()
	if err != nil {
		return nil, err
	}
	for _, fi := range infos {
		p.files[fi.Name()] = entry{
			mode:     os.FileMode(fi.Mode()).Perm(),
			dir:      fi.Mode()&0o170000 == 0o040000,
			conffile: fi.Flags()&rpmutils.RPMFILE_CONFIG != 0 && fi.Flags()&rpmutils.RPMFILE_NOREPLACE != 0,
		}
	}
	payload, err := r.PayloadReaderExtended()
	if err != nil {
		return nil, err
	}
	for {
		fi, err := payload.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(payload)
		if err != nil {
			return nil, err
		}
		e := p.files[fi.Name()]
		e.data = body
		p.files[fi.Name()] = e
	}
	return p, nil
}
