package main

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// staticBinary is any static ELF binary; Debian's busybox-static is one.
const staticBinary = "/bin/busybox"

// readArchive returns the files of an image layout tar by name.
func readArchive(t *testing.T, path string) map[string][]byte {
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
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		files[hdr.Name] = data
	}
	return files
}

func blob(t *testing.T, files map[string][]byte, digest string, v any) []byte {
	t.Helper()
	data, ok := files["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
	if !ok {
		t.Fatalf("blob %s missing from the archive", digest)
	}
	if v != nil {
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatalf("blob %s: %v", digest, err)
		}
	}
	return data
}

func TestBuildImage(t *testing.T) {
	if _, err := os.Stat(staticBinary); err != nil {
		t.Skipf("%s missing (apt-get install busybox-static)", staticBinary)
	}
	out := filepath.Join(t.TempDir(), "image.tar")
	if err := build(staticBinary, "localhost/nri-sysctl:v1.2.3", "amd64", out); err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, out)
	if string(files["oci-layout"]) == "" {
		t.Fatal("no oci-layout file")
	}
	var index struct {
		Manifests []struct {
			MediaType   string
			Digest      string
			Annotations map[string]string
			Platform    struct{ OS, Architecture string }
		}
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 1 {
		t.Fatalf("%d manifests, want 1", len(index.Manifests))
	}
	m := index.Manifests[0]
	if m.Annotations["io.containerd.image.name"] != "localhost/nri-sysctl:v1.2.3" || m.Annotations["org.opencontainers.image.ref.name"] != "v1.2.3" {
		t.Errorf("annotations %v", m.Annotations)
	}
	if m.Platform.OS != "linux" || m.Platform.Architecture != "amd64" || m.MediaType != "application/vnd.oci.image.manifest.v1+json" {
		t.Errorf("descriptor %+v", m)
	}
	var manifest struct {
		Config struct{ MediaType, Digest string }
		Layers []struct{ MediaType, Digest string }
	}
	blob(t, files, m.Digest, &manifest)
	var config struct {
		OS, Architecture string
		Config           struct {
			Entrypoint []string
			Cmd        []string
			User       string
			Env        []string
		}
	}
	blob(t, files, manifest.Config.Digest, &config)
	if !reflect.DeepEqual(config.Config.Entrypoint, []string{"/nri-sysctl"}) || config.Config.Cmd != nil || config.Config.User != "0" || config.OS != "linux" || config.Architecture != "amd64" {
		t.Errorf("config %+v", config)
	}
	if len(manifest.Layers) != 1 || manifest.Layers[0].MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
		t.Fatalf("layers %+v, want one gzip OCI layer", manifest.Layers)
	}
	zr, err := gzip.NewReader(strings.NewReader(string(blob(t, files, manifest.Layers[0].Digest, nil))))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	want, _ := os.ReadFile(staticBinary)
	var names []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		data, _ := io.ReadAll(tr)
		if hdr.Name == "nri-sysctl" && (hdr.Mode != 0o755 || hdr.Uid != 0 || string(data) != string(want)) {
			t.Errorf("nri-sysctl in the layer: mode %o uid %d, %d bytes (want 0755, 0, %d)", hdr.Mode, hdr.Uid, len(data), len(want))
		}
	}
	if !reflect.DeepEqual(names, []string{"nri-sysctl"}) {
		t.Errorf("layer holds %v, want the binary alone", names)
	}

	// The same input gives the same archive.
	again := filepath.Join(t.TempDir(), "again.tar")
	if err := build(staticBinary, "localhost/nri-sysctl:v1.2.3", "amd64", again); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(again)
	if string(a) != string(b) {
		t.Error("two builds of the same binary differ")
	}
}

func TestBuildImageRefuses(t *testing.T) {
	out := filepath.Join(t.TempDir(), "image.tar")
	if err := build(staticBinary, "localhost/nri-sysctl", "amd64", out); err == nil || !strings.Contains(err.Error(), "tag") {
		t.Errorf("no tag: %v", err)
	}
	if err := build("/bin/ls", "localhost/nri-sysctl:x", "amd64", out); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("dynamic binary: %v", err)
	}
	if err := build("/etc/hostname", "localhost/nri-sysctl:x", "amd64", out); err == nil || !strings.Contains(err.Error(), "ELF") {
		t.Errorf("not a binary: %v", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a refused build left an archive")
	}
}
