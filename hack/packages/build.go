// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the rpm packager
)

//go:embed scripts files
var embedded embed.FS

type options struct {
	repo, binDir, out      string
	debVersion, rpmVersion string
	config                 string // the shipped config; "" is the repository's
	arches, formats        []string
	mtime                  time.Time // zero: now
}

const (
	packageName = "nri-sysctl"
	maintainer  = "nri-sysctl maintainers <maintainers@nri-sysctl.invalid>"
	homepage    = "https://github.com/nri-sysctl/nri-sysctl"
	summary     = "node default namespaced sysctls for every pod (containerd NRI plugin)"
	description = summary + "\n" +
		"nri-sysctl is a containerd NRI plugin that gives every pod on a node the\n" +
		"node's default namespaced sysctls (net.*, the IPC keys, kernel.domainname),\n" +
		"never touching the host's namespaces and never overriding a pod's own\n" +
		"securityContext.sysctls. It runs as nri-sysctl.service beside containerd."
)

// machines is the ELF machine each GOARCH's binary must have.
var machines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// scripts are the maintainer scripts of each format, by nfpm's names.
var scripts = map[string]map[string]string{
	"deb": {"postinstall": "scripts/deb/postinst", "preremove": "scripts/deb/prerm", "postremove": "scripts/deb/postrm"},
	"rpm": {"postinstall": "scripts/rpm/post", "preremove": "scripts/rpm/preun", "postremove": "scripts/rpm/postun"},
}

// build writes one package per format and architecture into o.out and
// returns their paths.
func build(o options) ([]string, error) {
	if len(o.arches) == 0 || len(o.formats) == 0 {
		return nil, fmt.Errorf("no architecture or format given")
	}
	if o.mtime.IsZero() {
		o.mtime = time.Now().UTC().Truncate(time.Second)
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return nil, err
	}
	var written []string
	for _, format := range o.formats {
		for _, arch := range o.arches {
			p, err := buildOne(o, format, arch)
			if err != nil {
				return written, fmt.Errorf("%s %s: %w", format, arch, err)
			}
			written = append(written, p)
		}
	}
	return written, nil
}

func buildOne(o options, format, arch string) (string, error) {
	version := map[string]string{"deb": o.debVersion, "rpm": o.rpmVersion}[format]
	if _, ok := scripts[format]; !ok {
		return "", fmt.Errorf("unknown format %q (deb, rpm)", format)
	}
	if _, ok := machines[arch]; !ok {
		return "", fmt.Errorf("unknown architecture %q (amd64, arm64)", arch)
	}
	if version == "" {
		return "", fmt.Errorf("no -%s-version given", format)
	}
	staging, err := os.MkdirTemp("", "nri-sysctl-package-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(staging)
	if err := stage(o, format, arch, version, staging); err != nil {
		return "", err
	}
	entries, err := layout(o.repo, format, version)
	if err != nil {
		return "", err
	}
	var contents files.Contents
	dirs := map[string]bool{}
	for _, f := range entries {
		src := filepath.Join(o.repo, f.src)
		switch {
		case f.made:
			src = filepath.Join(staging, f.src)
		case f.rewrite:
			src = filepath.Join(staging, "rewritten", f.src)
		case f.conffile && o.config != "":
			src = o.config
		}
		c := &files.Content{Source: src, Destination: f.dst, Type: files.TypeFile,
			FileInfo: &files.ContentFileInfo{Mode: f.mode, MTime: o.mtime}}
		switch {
		case f.conffile:
			c.Type = files.TypeConfigNoReplace
		case f.doc && format == "rpm":
			c.Type = files.TypeRPMDoc
		}
		contents = append(contents, c)
		dirs[filepath.Dir(f.dst)] = true
	}
	// The package owns the directories that are its own.
	for _, d := range []string{"/etc/nri-sysctl", shareDir, shareDir + "/containerd", shareDir + "/systemd", docDir} {
		if dirs[d] || d == shareDir {
			contents = append(contents, &files.Content{Destination: d, Type: files.TypeDir,
				FileInfo: &files.ContentFileInfo{Mode: 0o755, MTime: o.mtime}})
		}
	}
	info := &nfpm.Info{
		Name:          packageName,
		Arch:          arch,
		Platform:      "linux",
		Version:       version,
		VersionSchema: "none", // DEB_VERSION / RPM_VERSION are already in each format's form
		Section:       "admin",
		Priority:      "optional",
		Maintainer:    maintainer,
		Vendor:        "nri-sysctl",
		Homepage:      homepage,
		Description:   description,
		License:       "Apache-2.0",
		MTime:         o.mtime,
		Overridables: nfpm.Overridables{
			Contents: contents,
			Scripts: nfpm.Scripts{
				PostInstall: filepath.Join(staging, scripts[format]["postinstall"]),
				PreRemove:   filepath.Join(staging, scripts[format]["preremove"]),
				PostRemove:  filepath.Join(staging, scripts[format]["postremove"]),
			},
			RPM: nfpm.RPM{Summary: summary, Group: "System Environment/Daemons", BuildHost: "localhost", Compression: "gzip"},
			Deb: nfpm.Deb{Compression: "gzip"},
		},
	}
	if format == "rpm" {
		info.Release = "1"
	}
	packager, err := nfpm.Get(format)
	if err != nil {
		return "", err
	}
	info = nfpm.WithDefaults(info)
	name := packager.ConventionalFileName(info)
	out := filepath.Join(o.out, name)
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return "", err
	}
	if err := packager.Package(info, f); err != nil {
		f.Close()
		os.Remove(tmp)
		return "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return out, os.Rename(tmp, out)
}

// stage writes into dir what the package needs beyond the repository's
// files: the binary (checked for its architecture), the units and the
// metrics drop-in with the package's binary path, the scripts, the
// changelog and copyright (deb) and the preset (rpm).
func stage(o options, format, arch, version, dir string) error {
	bin := filepath.Join(o.binDir, arch, "nri-sysctl")
	if err := checkMachine(bin, arch); err != nil {
		return err
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, madeBinary), data, 0o755); err != nil {
		return err
	}
	entries, err := layout(o.repo, format, version)
	if err != nil {
		return err
	}
	for _, f := range entries {
		if !f.rewrite {
			continue
		}
		text, err := os.ReadFile(filepath.Join(o.repo, f.src))
		if err != nil {
			return err
		}
		if !bytes.Contains(text, []byte(installedBinary)) {
			return fmt.Errorf("%s no longer names %s: the package's rewrite to %s would do nothing", f.src, installedBinary, binaryPath)
		}
		if err := writeStaged(dir, filepath.Join("rewritten", f.src), bytes.ReplaceAll(text, []byte(installedBinary), []byte(binaryPath)), 0o644); err != nil {
			return err
		}
	}
	for _, s := range scripts[format] {
		text, err := embedded.ReadFile(s)
		if err != nil {
			return err
		}
		if err := writeStaged(dir, s, text, 0o755); err != nil {
			return err
		}
	}
	man, err := embedded.ReadFile("files/nri-sysctl.8")
	if err != nil {
		return err
	}
	manGz, err := gzipBest(man)
	if err != nil {
		return err
	}
	if err := writeStaged(dir, madeManPage, manGz, 0o644); err != nil {
		return err
	}
	switch format {
	case "deb":
		copyright, err := embedded.ReadFile("files/copyright")
		if err != nil {
			return err
		}
		if err := writeStaged(dir, madeCopyright, copyright, 0o644); err != nil {
			return err
		}
		changelog, err := debianChangelog(version, o.mtime)
		if err != nil {
			return err
		}
		return writeStaged(dir, madeChangelog, changelog, 0o644)
	case "rpm":
		preset, err := embedded.ReadFile("files/nri-sysctl.preset")
		if err != nil {
			return err
		}
		return writeStaged(dir, madePreset, preset, 0o644)
	}
	return nil
}

func writeStaged(dir, name string, data []byte, mode os.FileMode) error {
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, data, mode)
}

// checkMachine refuses a binary built for another architecture.
func checkMachine(path, arch string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w (build it with CGO_ENABLED=0 GOARCH=%s)", path, err, arch)
	}
	defer f.Close()
	if f.Machine != machines[arch] {
		return fmt.Errorf("%s is a %s binary, not %s (%s)", path, f.Machine, arch, machines[arch])
	}
	return nil
}

// debianChangelog is the Debian changelog: one entry for this version,
// pointing to the project's CHANGELOG.md.
func debianChangelog(version string, date time.Time) ([]byte, error) {
	text := fmt.Sprintf(`%s (%s) stable; urgency=medium

  * Release %s. What changed for users: CHANGELOG.md in the source.

 -- %s  %s
`, packageName, version, version, maintainer, date.UTC().Format(time.RFC1123Z))
	return gzipBest([]byte(text))
}

// gzipBest compresses as gzip -9n does: best compression, no name or time
// in the header (lintian checks both for changelogs and manual pages).
func gzipBest(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
