// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readTar returns the regular files of a tar by name.
func readTar(t *testing.T, data []byte) (files map[string][]byte, links map[string]string) {
	t.Helper()
	files, links = map[string][]byte{}, map[string]string{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, links
		}
		if err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		case tar.TypeSymlink:
			links[h.Name] = h.Linkname
		}
	}
}

func TestWriteArchive(t *testing.T) {
	if _, err := os.Stat(BusyboxPath); err != nil {
		t.Skipf("%s is not installed (busybox-static): %v", BusyboxPath, err)
	}
	images := []Image{
		{Name: "localhost/test/pause:latest", Entrypoint: []string{"/bin/sleep", "infinity"}},
		{Name: "localhost/test/busybox:1.0", Cmd: []string{"/bin/sh"}},
	}
	dir := t.TempDir()
	first, second := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	for _, p := range []string{first, second} {
		if err := WriteArchive(p, images); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := os.ReadFile(first)
	b, _ := os.ReadFile(second)
	if !bytes.Equal(a, b) {
		t.Fatalf("two archives of the same images differ: the VM test's node-image key would change on every run")
	}

	files, _ := readTar(t, a)
	for name, data := range files {
		if !strings.HasPrefix(name, "blobs/sha256/") {
			continue
		}
		sum := sha256.Sum256(data)
		if got := hex.EncodeToString(sum[:]); got != strings.TrimPrefix(name, "blobs/sha256/") {
			t.Errorf("%s holds content with digest %s", name, got)
		}
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if len(index.Manifests) != len(images) {
		t.Fatalf("index lists %d manifests, want %d", len(index.Manifests), len(images))
	}
	for i, m := range index.Manifests {
		if got := m.Annotations["io.containerd.image.name"]; got != images[i].Name {
			t.Errorf("manifest %d names %q, want %q", i, got, images[i].Name)
		}
		if got, want := m.Annotations["org.opencontainers.image.ref.name"], tagOf(images[i].Name); got != want {
			t.Errorf("manifest %d ref.name %q, want %q", i, got, want)
		}
		var manifest struct {
			Layers []descriptor `json:"layers"`
		}
		if err := json.Unmarshal(files["blobs/sha256/"+strings.TrimPrefix(m.Digest, "sha256:")], &manifest); err != nil || len(manifest.Layers) != 1 {
			t.Fatalf("manifest %d: %v, %d layer(s)", i, err, len(manifest.Layers))
		}
		layer := files["blobs/sha256/"+strings.TrimPrefix(manifest.Layers[0].Digest, "sha256:")]
		rootfs, links := readTar(t, layer)
		if len(rootfs["bin/busybox"]) == 0 || links["bin/sh"] != "busybox" || links["bin/sleep"] != "busybox" {
			t.Errorf("manifest %d: the layer lacks bin/busybox, or bin/sh and bin/sleep applets: sh -> %q", i, links["bin/sh"])
		}
	}
}

func TestTagOf(t *testing.T) {
	for ref, want := range map[string]string{
		"localhost/a/b:1.2":     "1.2",
		"localhost/a/b":         "latest",
		"localhost:5000/a/b":    "latest",
		"localhost:5000/a/b:v1": "v1",
	} {
		if got := tagOf(ref); got != want {
			t.Errorf("tagOf(%q) = %q, want %q", ref, got, want)
		}
	}
}
