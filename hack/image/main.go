// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Command image builds the nri-sysctl container image offline, as an OCI
// image layout archive that `ctr -n k8s.io images import` takes: one image
// index naming an image per architecture, each one layer holding that
// architecture's static binary at /nri-sysctl, USER 0, ENTRYPOINT
// ["/nri-sysctl"] (the Dockerfile's image, without a registry or a daemon).
//
//	go run . -binary amd64=../../bin/nri-sysctl -binary arm64=../../bin/linux-arm64/nri-sysctl \
//		-name localhost/nri-sysctl:0.2.0 -out ../../bin/nri-sysctl-image.tar
//
// It lives in a module of its own so that go-containerregistry and what it
// pulls in stay out of the plugin's go.mod.
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// entrypoint is where the binary lives in the image.
const entrypoint = "/nri-sysctl"

// docDir is where the image holds the licence and the third-party
// notices, as the packages do.
const docDir = "usr/share/doc/nri-sysctl"

// defaultDocs are the files put in docDir, relative to hack/image: the
// licence and the notices of the modules compiled in (make notices).
var defaultDocs = []string{"../../LICENSE", "../../THIRD_PARTY_NOTICES"}

// elfMachines is the ELF machine of each architecture the image is built
// for: a binary is refused under an architecture it was not built for.
var elfMachines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64,
	"arm64": elf.EM_AARCH64,
}

// platformBinary is one architecture's binary.
type platformBinary struct {
	arch, path string
}

// binaryFlags collects -binary ARCH=PATH; a bare PATH is -arch's.
type binaryFlags struct {
	values  []string
	defArch *string
}

func (b *binaryFlags) String() string     { return strings.Join(b.values, ",") }
func (b *binaryFlags) Set(v string) error { b.values = append(b.values, v); return nil }

func (b *binaryFlags) binaries() []platformBinary {
	values := b.values
	if len(values) == 0 {
		values = []string{"bin/nri-sysctl"}
	}
	var bins []platformBinary
	for _, v := range values {
		arch, path, ok := strings.Cut(v, "=")
		if !ok {
			arch, path = *b.defArch, v
		}
		bins = append(bins, platformBinary{arch: arch, path: path})
	}
	return bins
}

func main() {
	arch := flag.String("arch", runtime.GOARCH, "the architecture (GOARCH) of a -binary given without ARCH=")
	bins := &binaryFlags{defArch: arch}
	flag.Var(bins, "binary", "ARCH=PATH: the static nri-sysctl binary for GOARCH ARCH (make build); repeat it, once per architecture (default bin/nri-sysctl, for -arch)")
	name := flag.String("name", "", "image name with tag, e.g. localhost/nri-sysctl:0.2.0")
	out := flag.String("out", "bin/nri-sysctl-image.tar", "OCI image layout archive to write")
	flag.Parse()
	platforms := bins.binaries()
	if err := build(platforms, defaultDocs, *name, *out); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	var archs []string
	for _, p := range platforms {
		archs = append(archs, "linux/"+p.arch)
	}
	fmt.Printf("%s: %s (%s)\n", *out, *name, strings.Join(archs, ", "))
}

func build(binaries []platformBinary, docPaths []string, name, out string) error {
	tag, err := tagOf(name)
	if err != nil {
		return err
	}
	docs, err := readDocs(docPaths)
	if err != nil {
		return err
	}
	if len(binaries) == 0 {
		return errors.New("no -binary: want one ARCH=PATH per architecture")
	}
	var adds []mutate.IndexAddendum
	var seen []string
	for _, b := range binaries {
		if slices.Contains(seen, b.arch) {
			return fmt.Errorf("-binary %s=%s: architecture %s given twice", b.arch, b.path, b.arch)
		}
		seen = append(seen, b.arch)
		img, err := platformImage(b, docs, tag)
		if err != nil {
			return err
		}
		adds = append(adds, mutate.IndexAddendum{
			Add: img,
			Descriptor: v1.Descriptor{
				MediaType: types.OCIManifestSchema1,
				Platform:  &v1.Platform{OS: "linux", Architecture: b.arch},
			},
		})
	}
	index := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	return writeArchive(index, name, tag, out)
}

// platformImage checks one architecture's binary and builds its image.
func platformImage(b platformBinary, docs []docFile, tag string) (v1.Image, error) {
	if err := checkBinary(b); err != nil {
		return nil, err
	}
	bin, err := os.ReadFile(b.path)
	if err != nil {
		return nil, err
	}
	return image(bin, docs, tag, b.arch)
}

// tagOf refuses a name without a tag: containerd would name the image
// from the annotation as given.
func tagOf(name string) (string, error) {
	i := strings.LastIndex(name, ":")
	if name == "" || i < 0 || i < strings.LastIndex(name, "/") || i == len(name)-1 {
		return "", fmt.Errorf("-name %q: want a name with a tag, e.g. localhost/nri-sysctl:0.2.0", name)
	}
	return name[i+1:], nil
}

// checkBinary refuses an architecture the image is not built for, and a
// binary that is not a static ELF binary of that architecture.
func checkBinary(b platformBinary) error {
	want, ok := elfMachines[b.arch]
	if !ok {
		known := make([]string, 0, len(elfMachines))
		for a := range elfMachines {
			known = append(known, a)
		}
		sort.Strings(known)
		return fmt.Errorf("-binary %s=%s: unknown architecture %q (one of %s)", b.arch, b.path, b.arch, strings.Join(known, ", "))
	}
	f, err := elf.Open(b.path)
	if err != nil {
		return fmt.Errorf("%s: not an ELF binary: %w", b.path, err)
	}
	defer f.Close()
	if f.Machine != want {
		return fmt.Errorf("%s is a %s binary, not %s (%s): build it with GOARCH=%s (make build GOARCH=%s)", b.path, f.Machine, b.arch, want, b.arch, b.arch)
	}
	return checkStatic(b.path, f)
}

// checkStatic refuses a dynamically linked binary: the image has no libc.
func checkStatic(path string, f *elf.File) error {
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (it has an ELF interpreter); the image has no libc: build it with CGO_ENABLED=0 (make build)", path)
		}
	}
	return nil
}

// docFile is a file the image holds in docDir.
type docFile struct {
	name string
	data []byte
}

func readDocs(paths []string) ([]docFile, error) {
	docs := make([]docFile, 0, len(paths))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		docs = append(docs, docFile{name: filepath.Base(p), data: data})
	}
	return docs, nil
}

// layerTar is the layer: docDir's parents and docs (mode 0644), then the
// binary (mode 0755), all root's, at time 0.
func layerTar(bin []byte, docs []docFile) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if len(docs) > 0 {
		parts := strings.Split(docDir, "/")
		for i := range parts {
			dir := &tar.Header{Typeflag: tar.TypeDir, Name: strings.Join(parts[:i+1], "/") + "/", Mode: 0o755, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
			if err := tw.WriteHeader(dir); err != nil {
				return nil, err
			}
		}
	}
	for _, d := range docs {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: docDir + "/" + d.name, Mode: 0o644, Size: int64(len(d.data)), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(d.data); err != nil {
			return nil, err
		}
	}
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     strings.TrimPrefix(entrypoint, "/"),
		Mode:     0o755,
		Size:     int64(len(bin)),
		ModTime:  time.Unix(0, 0),
		Format:   tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func image(bin []byte, docs []docFile, tag, arch string) (v1.Image, error) {
	data, err := layerTar(bin, docs)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:   layer,
		History: v1.History{CreatedBy: "nri-sysctl hack/image: COPY nri-sysctl (linux/" + arch + ") " + entrypoint, Created: v1.Time{Time: time.Unix(0, 0).UTC()}},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = arch
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Entrypoint = []string{entrypoint}
	cf.Config.Cmd = nil
	cf.Config.User = "0"
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":   "nri-sysctl",
		"org.opencontainers.image.source":  "https://github.com/nri-sysctl/nri-sysctl",
		"org.opencontainers.image.version": tag,
	}
	return mutate.ConfigFile(img, cf)
}

// writeArchive writes an OCI image layout whose index.json names the image
// index (containerd's and OCI's annotations) as a tar, through a temporary
// file renamed into place. containerd imports it as one image; each node
// pulls its own platform's manifest from the index.
func writeArchive(index v1.ImageIndex, name, tag, out string) (err error) {
	dir, err := os.MkdirTemp("", "nri-sysctl-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	err = p.AppendIndex(index,
		layout.WithAnnotations(map[string]string{
			"io.containerd.image.name":          name,
			"org.opencontainers.image.ref.name": tag,
		}))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".nri-sysctl-image-*.tar")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tarDir(dir, tmp); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}

// tarDir writes dir's regular files and directories, sorted, root's, at time 0.
func tarDir(dir string, w io.Writer) error {
	var paths []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != dir {
			paths = append(paths, path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	tw := tar.NewWriter(w)
	for _, path := range paths {
		rel, _ := filepath.Rel(dir, path)
		info, err := os.Lstat(path)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: time.Unix(0, 0), Mode: 0o644}
		switch {
		case info.IsDir():
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
		case info.Mode().IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
		default:
			return errors.New(path + ": unexpected file type in the image layout")
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg {
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				return err
			}
		}
	}
	return tw.Close()
}
