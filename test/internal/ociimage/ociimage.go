// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package ociimage builds the offline test images that the end-to-end
// tests and the VM test import into containerd. No registry can be reached
// from the test machines, so the images are written here as one OCI image
// layout (tar) whose images share a single layer: a static busybox, one
// symlink per applet, and the directories a container needs. Fixed mtimes
// and order make the tar reproducible (the VM test keys its node image on
// it).
package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
)

// BusyboxPath is the static busybox (Debian package busybox-static) copied
// into the images.
const BusyboxPath = "/bin/busybox"

// The images every test imports: containerd's pinned sandbox (pause) image
// runs "sleep infinity"; every test container runs the busybox image.
const (
	PauseImage   = "localhost/nri-sysctl-test/pause:latest"
	BusyboxImage = "localhost/nri-sysctl-test/busybox:latest"
)

// TestImages are PauseImage and BusyboxImage.
var TestImages = []Image{
	{Name: PauseImage, Entrypoint: []string{"/bin/sleep", "infinity"}},
	{Name: BusyboxImage, Cmd: []string{"/bin/sh"}},
}

// Image is one image of the archive.
type Image struct {
	Name       string // full reference, e.g. localhost/nri-sysctl-test/busybox:latest
	Entrypoint []string
	Cmd        []string
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type blob struct {
	digest string // sha256:<hex>
	data   []byte
}

func newBlob(data []byte) blob {
	sum := sha256.Sum256(data)
	return blob{digest: "sha256:" + hex.EncodeToString(sum[:]), data: data}
}

// busyboxApplets lists the applets the static busybox provides.
func busyboxApplets() ([]string, error) {
	out, err := exec.Command(BusyboxPath, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", BusyboxPath, err)
	}
	var applets []string
	for _, a := range strings.Fields(string(out)) {
		if a != "busybox" && !strings.Contains(a, "/") {
			applets = append(applets, a)
		}
	}
	sort.Strings(applets)
	return applets, nil
}

// rootfsLayer returns the uncompressed layer tar.
func rootfsLayer() ([]byte, error) {
	bb, err := os.ReadFile(BusyboxPath)
	if err != nil {
		return nil, fmt.Errorf("read %s (apt-get install busybox-static, see test/setup.sh): %w", BusyboxPath, err)
	}
	applets, err := busyboxApplets()
	if err != nil {
		return nil, err
	}
	mtime := time.Unix(0, 0)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	header := func(h *tar.Header) error { h.ModTime = mtime; return tw.WriteHeader(h) }
	for _, d := range []string{"bin", "dev", "etc", "proc", "sys", "run", "var", "root", "shared"} {
		if err := header(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}); err != nil {
			return nil, err
		}
	}
	if err := header(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777}); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{
		{"etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n")},
		{"etc/group", 0o644, []byte("root:x:0:\n")},
		{"bin/busybox", 0o755, bb},
	} {
		if err := header(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: f.mode, Size: int64(len(f.data))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	for _, a := range applets {
		if err := header(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteArchive writes an OCI image layout tar holding images to path.
func WriteArchive(path string, images []Image) error {
	layerData, err := rootfsLayer()
	if err != nil {
		return err
	}
	layer := newBlob(layerData)
	blobs := map[string]blob{layer.digest: layer}
	var manifests []descriptor
	plat := &platform{Architecture: runtime.GOARCH, OS: "linux"}
	for _, img := range images {
		cfg, err := json.Marshal(map[string]any{
			"architecture": runtime.GOARCH,
			"os":           "linux",
			"config":       map[string]any{"Env": []string{"PATH=/bin"}, "Entrypoint": img.Entrypoint, "Cmd": img.Cmd, "WorkingDir": "/"},
			// An uncompressed layer: its digest is its diff_id.
			"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{layer.digest}},
			"history": []map[string]string{{"created_by": "nri-sysctl test harness"}},
		})
		if err != nil {
			return err
		}
		cfgBlob := newBlob(cfg)
		blobs[cfgBlob.digest] = cfgBlob
		manifest, err := json.Marshal(map[string]any{
			"schemaVersion": 2,
			"mediaType":     mediaTypeManifest,
			"config":        descriptor{MediaType: mediaTypeConfig, Digest: cfgBlob.digest, Size: int64(len(cfg))},
			"layers":        []descriptor{{MediaType: mediaTypeLayer, Digest: layer.digest, Size: int64(len(layerData))}},
		})
		if err != nil {
			return err
		}
		manBlob := newBlob(manifest)
		blobs[manBlob.digest] = manBlob
		manifests = append(manifests, descriptor{
			MediaType: mediaTypeManifest,
			Digest:    manBlob.digest,
			Size:      int64(len(manifest)),
			Platform:  plat,
			Annotations: map[string]string{
				"io.containerd.image.name":          img.Name,
				"org.opencontainers.image.ref.name": tagOf(img.Name),
			},
		})
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mediaTypeIndex, "manifests": manifests})
	if err != nil {
		return err
	}
	return writeLayout(path, index, blobs)
}

// tagOf is the tag of a reference, "latest" when it has none.
func tagOf(ref string) string {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[i+1:]
	}
	return "latest"
}

// writeLayout writes the layout's files into a tar at path, blobs sorted.
func writeLayout(path string, index []byte, blobs map[string]blob) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := add("index.json", index); err != nil {
		return err
	}
	digests := make([]string, 0, len(blobs))
	for d := range blobs {
		digests = append(digests, d)
	}
	sort.Strings(digests)
	for _, d := range digests {
		if err := add(filepath.Join("blobs", "sha256", strings.TrimPrefix(d, "sha256:")), blobs[d].data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
