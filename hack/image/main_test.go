// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fakeELF writes a minimal static ELF64 executable header for machine:
// enough for debug/elf (no program headers, so no interpreter), and the
// bytes differ per machine so that each layer's binary can be told apart.
func fakeELF(t *testing.T, machine elf.Machine) string {
	t.Helper()
	var hdr elf.Header64
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	hdr.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	hdr.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	hdr.Type = uint16(elf.ET_EXEC)
	hdr.Machine = uint16(machine)
	hdr.Version = uint32(elf.EV_CURRENT)
	hdr.Ehsize = 64
	var buf bytes.Buffer
	if err := binary.Write(&buf, binary.LittleEndian, hdr); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), machine.String())
	if err := os.WriteFile(path, buf.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func twoPlatforms(t *testing.T) []platformBinary {
	return []platformBinary{
		{arch: "amd64", path: fakeELF(t, elf.EM_X86_64)},
		{arch: "arm64", path: fakeELF(t, elf.EM_AARCH64)},
	}
}

func TestBuildImageIndex(t *testing.T) {
	bins := twoPlatforms(t)
	out := filepath.Join(t.TempDir(), "image.tar")
	if err := build(bins, defaultDocs, "localhost/nri-sysctl:1.2.3", out); err != nil {
		t.Fatal(err)
	}
	checkArchive(t, out, "localhost/nri-sysctl:1.2.3", bins)

	// The same input gives the same archive.
	again := filepath.Join(t.TempDir(), "again.tar")
	if err := build(bins, defaultDocs, "localhost/nri-sysctl:1.2.3", again); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(again)
	if !bytes.Equal(a, b) {
		t.Error("two builds of the same binaries differ")
	}
}

// TestImageArchive checks the archive `make image` wrote the way
// TestBuildImageIndex checks its own. make arch-test sets
// NRI_SYSCTL_IMAGE_ARCHIVE, NRI_SYSCTL_IMAGE_NAME and
// NRI_SYSCTL_IMAGE_BINARIES ("amd64=PATH arm64=PATH", the binaries that
// went in, in the index's order).
func TestImageArchive(t *testing.T) {
	archive := os.Getenv("NRI_SYSCTL_IMAGE_ARCHIVE")
	if archive == "" {
		t.Skip("NRI_SYSCTL_IMAGE_ARCHIVE is not set (make arch-test sets it)")
	}
	var bins []platformBinary
	for _, f := range strings.Fields(os.Getenv("NRI_SYSCTL_IMAGE_BINARIES")) {
		arch, path, _ := strings.Cut(f, "=")
		bins = append(bins, platformBinary{arch: arch, path: path})
	}
	var archs []string
	for _, b := range bins {
		archs = append(archs, b.arch)
	}
	if !reflect.DeepEqual(archs, []string{"amd64", "arm64"}) {
		t.Fatalf("NRI_SYSCTL_IMAGE_BINARIES names %v, want amd64 and arm64", archs)
	}
	checkArchive(t, archive, os.Getenv("NRI_SYSCTL_IMAGE_NAME"), bins)
}

// layoutFiles returns the files of an image layout tar by name, and checks
// that every blob's name is its content's digest.
func layoutFiles(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = data
		if name, ok := strings.CutPrefix(hdr.Name, "blobs/sha256/"); ok && hdr.Typeflag == tar.TypeReg {
			if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != name {
				t.Errorf("%s holds content of digest sha256:%s", hdr.Name, hex.EncodeToString(sum[:]))
			}
		}
	}
	return files
}

type descriptor struct {
	MediaType   string
	Digest      string
	Size        int64
	Annotations map[string]string
	Platform    *struct {
		OS, Architecture, Variant string
	}
}

// blob is the content a descriptor names, checked against the descriptor's
// digest and size, and decoded into v unless v is nil.
func blob(t *testing.T, files map[string][]byte, d descriptor, v any) []byte {
	t.Helper()
	data, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
	if !ok {
		t.Fatalf("blob %s missing from the archive", d.Digest)
	}
	if sum := sha256.Sum256(data); "sha256:"+hex.EncodeToString(sum[:]) != d.Digest || int64(len(data)) != d.Size {
		t.Fatalf("descriptor %s (%d bytes) names content of digest sha256:%x, %d bytes", d.Digest, d.Size, sum, len(data))
	}
	if v != nil {
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatalf("blob %s: %v", d.Digest, err)
		}
	}
	return data
}

// checkArchive: index.json names one image index (containerd's and OCI's
// name annotations); the index has one manifest per binary, in order, with
// its platform; each manifest's config has that os and architecture and
// the Dockerfile's entrypoint and user; its one layer holds the binary
// alone, byte for byte, an ELF binary of that architecture.
func checkArchive(t *testing.T, path, name string, bins []platformBinary) {
	t.Helper()
	files := layoutFiles(t, path)
	if string(files["oci-layout"]) == "" {
		t.Fatal("no oci-layout file")
	}
	var top struct{ Manifests []descriptor }
	if err := json.Unmarshal(files["index.json"], &top); err != nil {
		t.Fatal(err)
	}
	if len(top.Manifests) != 1 {
		t.Fatalf("index.json: %d descriptors, want 1 (the image index)", len(top.Manifests))
	}
	tag := name[strings.LastIndex(name, ":")+1:]
	d := top.Manifests[0]
	if d.MediaType != "application/vnd.oci.image.index.v1+json" || d.Annotations["io.containerd.image.name"] != name || d.Annotations["org.opencontainers.image.ref.name"] != tag {
		t.Errorf("index.json names %+v, want an OCI image index named %s", d, name)
	}
	var index struct {
		MediaType string
		Manifests []descriptor
	}
	blob(t, files, d, &index)
	if index.MediaType != "application/vnd.oci.image.index.v1+json" || len(index.Manifests) != len(bins) {
		t.Fatalf("image index: media type %s, %d manifests, want %d", index.MediaType, len(index.Manifests), len(bins))
	}
	for i, b := range bins {
		m := index.Manifests[i]
		if m.MediaType != "application/vnd.oci.image.manifest.v1+json" || m.Platform == nil || m.Platform.OS != "linux" || m.Platform.Architecture != b.arch || m.Platform.Variant != "" {
			t.Errorf("manifest %d: %+v %+v, want linux/%s", i, m, m.Platform, b.arch)
			continue
		}
		checkManifest(t, files, m, b, tag)
	}
}

func checkManifest(t *testing.T, files map[string][]byte, m descriptor, b platformBinary, tag string) {
	t.Helper()
	var manifest struct {
		MediaType string
		Config    descriptor
		Layers    []descriptor
	}
	blob(t, files, m, &manifest)
	var config struct {
		OS, Architecture string
		Config           struct {
			Entrypoint []string
			Cmd        []string
			User       string
			Labels     map[string]string
		}
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	blob(t, files, manifest.Config, &config)
	if config.OS != "linux" || config.Architecture != b.arch {
		t.Errorf("linux/%s: config says %s/%s", b.arch, config.OS, config.Architecture)
	}
	if !reflect.DeepEqual(config.Config.Entrypoint, []string{"/nri-sysctl"}) || config.Config.Cmd != nil || config.Config.User != "0" || config.Config.Labels["org.opencontainers.image.version"] != tag {
		t.Errorf("linux/%s: config %+v", b.arch, config.Config)
	}
	if len(manifest.Layers) != 1 || manifest.Layers[0].MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" || len(config.RootFS.DiffIDs) != 1 {
		t.Fatalf("linux/%s: layers %+v, diff_ids %v, want one gzip OCI layer", b.arch, manifest.Layers, config.RootFS.DiffIDs)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, manifest.Layers[0], nil)))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(layer); "sha256:"+hex.EncodeToString(sum[:]) != config.RootFS.DiffIDs[0] {
		t.Errorf("linux/%s: the layer's diff_id is %s, its content sha256:%x", b.arch, config.RootFS.DiffIDs[0], sum)
	}
	want, err := os.ReadFile(b.path)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(layer))
	var names []string
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		data, _ := io.ReadAll(tr)
		if doc, ok := strings.CutPrefix(hdr.Name, docDir+"/"); ok && doc != "" {
			want, err := os.ReadFile("../../" + doc)
			if err != nil || !bytes.Equal(data, want) || hdr.Mode != 0o644 {
				t.Errorf("linux/%s: %s in the layer: mode %o, %d bytes; want 0644 and the repository's %s (%v)", b.arch, hdr.Name, hdr.Mode, len(data), doc, err)
			}
			continue
		}
		if hdr.Name != "nri-sysctl" {
			continue
		}
		if hdr.Mode != 0o755 || hdr.Uid != 0 || !bytes.Equal(data, want) {
			t.Errorf("linux/%s: nri-sysctl in the layer: mode %o uid %d, %d bytes (want 0755, 0, %s's %d)", b.arch, hdr.Mode, hdr.Uid, len(data), b.path, len(want))
		}
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			t.Errorf("linux/%s: nri-sysctl in the layer is not an ELF binary: %v", b.arch, err)
			continue
		}
		if f.Machine != elfMachines[b.arch] {
			t.Errorf("linux/%s: nri-sysctl in the layer is a %s binary, want %s", b.arch, f.Machine, elfMachines[b.arch])
		}
	}
	wantNames := []string{"usr/", "usr/share/", "usr/share/doc/", "usr/share/doc/nri-sysctl/", docDir + "/LICENSE", docDir + "/THIRD_PARTY_NOTICES", "nri-sysctl"}
	if !reflect.DeepEqual(names, wantNames) {
		t.Errorf("linux/%s: layer holds %v, want %v: the binary, the licence and the notices", b.arch, names, wantNames)
	}
}

func TestBuildImageRefuses(t *testing.T) {
	out := filepath.Join(t.TempDir(), "image.tar")
	amd64, arm64 := fakeELF(t, elf.EM_X86_64), fakeELF(t, elf.EM_AARCH64)
	for _, c := range []struct {
		name, want string
		bins       []platformBinary
	}{
		{"localhost/nri-sysctl", "tag", []platformBinary{{"amd64", amd64}}},
		{"localhost/nri-sysctl:x", "dynamically linked", []platformBinary{{"amd64", "/bin/ls"}}},
		{"localhost/nri-sysctl:x", "not an ELF binary", []platformBinary{{"amd64", "/etc/hostname"}}},
		{"localhost/nri-sysctl:x", "is a EM_AARCH64 binary, not amd64", []platformBinary{{"amd64", arm64}}},
		{"localhost/nri-sysctl:x", "is a EM_X86_64 binary, not arm64", []platformBinary{{"amd64", amd64}, {"arm64", amd64}}},
		{"localhost/nri-sysctl:x", `unknown architecture "riscv64" (one of amd64, arm64)`, []platformBinary{{"riscv64", amd64}}},
		{"localhost/nri-sysctl:x", "architecture amd64 given twice", []platformBinary{{"amd64", amd64}, {"amd64", amd64}}},
		{"localhost/nri-sysctl:x", "no -binary", nil},
	} {
		if err := build(c.bins, defaultDocs, c.name, out); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: %v, want an error with %q", c.name, c.bins, err, c.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a refused build left an archive")
	}
}

func TestBinaryFlags(t *testing.T) {
	arch := "arm64"
	b := &binaryFlags{defArch: &arch}
	if got, want := b.binaries(), []platformBinary{{"arm64", "bin/nri-sysctl"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("no -binary: %v, want %v", got, want)
	}
	for _, v := range []string{"amd64=bin/nri-sysctl", "bin/linux-arm64/nri-sysctl"} {
		if err := b.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := b.binaries(), []platformBinary{{"amd64", "bin/nri-sysctl"}, {"arm64", "bin/linux-arm64/nri-sysctl"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("-binary %v: %v, want %v", b, got, want)
	}
}
