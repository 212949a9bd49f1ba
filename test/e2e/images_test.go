package e2e

// Offline test images. No registry can be reached from the test machines, so
// the images are built here as one OCI image layout (tar) holding two images
// that share a single layer: a static busybox plus its applet symlinks.
//   - pauseImage: entrypoint "sleep infinity"; containerd uses it as the pinned
//     sandbox (pause) image.
//   - busyboxImage: the image every test container runs.

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

// busyboxPath is the static busybox (Debian package busybox-static) copied
// into the test images.
var busyboxPath = "/bin/busybox"

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *ociPlatform      `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type ociPlatform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type ociBlob struct {
	digest string // sha256:<hex>
	data   []byte
}

func newBlob(data []byte) ociBlob {
	sum := sha256.Sum256(data)
	return ociBlob{digest: "sha256:" + hex.EncodeToString(sum[:]), data: data}
}

// busyboxApplets lists the applets the static busybox provides.
func busyboxApplets() ([]string, error) {
	out, err := exec.Command(busyboxPath, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", busyboxPath, err)
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

// buildRootfsLayer returns an uncompressed layer tar with /bin/busybox, a
// symlink per applet, and the directories a container needs.
func buildRootfsLayer() ([]byte, error) {
	bb, err := os.ReadFile(busyboxPath)
	if err != nil {
		return nil, fmt.Errorf("read %s (install busybox-static, see test/setup.sh): %w", busyboxPath, err)
	}
	applets, err := busyboxApplets()
	if err != nil {
		return nil, err
	}
	mtime := time.Unix(0, 0)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: mtime})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, d := range []string{"bin", "dev", "etc", "proc", "sys", "run", "var", "root", "shared"} {
		if err := dir(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := dir("tmp", 0o1777); err != nil {
		return nil, err
	}
	if err := file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n")); err != nil {
		return nil, err
	}
	if err := file("etc/group", 0o644, []byte("root:x:0:\n")); err != nil {
		return nil, err
	}
	if err := file("bin/busybox", 0o755, bb); err != nil {
		return nil, err
	}
	for _, a := range applets {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777, ModTime: mtime}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

type imageSpec struct {
	name       string // full reference, e.g. localhost/nri-sysctl-test/busybox:latest
	entrypoint []string
	cmd        []string
}

// buildImageArchive writes an OCI image layout tar holding all images to path.
func buildImageArchive(path string, images []imageSpec) error {
	layerData, err := buildRootfsLayer()
	if err != nil {
		return err
	}
	layer := newBlob(layerData)
	blobs := map[string]ociBlob{layer.digest: layer}
	var manifests []ociDescriptor
	platform := &ociPlatform{Architecture: runtime.GOARCH, OS: "linux"}

	for _, img := range images {
		cfg := map[string]any{
			"architecture": runtime.GOARCH,
			"os":           "linux",
			"config": map[string]any{
				"Env":        []string{"PATH=/bin"},
				"Entrypoint": img.entrypoint,
				"Cmd":        img.cmd,
				"WorkingDir": "/",
			},
			"rootfs": map[string]any{
				"type":     "layers",
				"diff_ids": []string{layer.digest}, // uncompressed layer: digest == diff_id
			},
			"history": []map[string]string{{"created_by": "nri-sysctl e2e harness"}},
		}
		cfgData, err := json.Marshal(cfg)
		if err != nil {
			return err
		}
		cfgBlob := newBlob(cfgData)
		blobs[cfgBlob.digest] = cfgBlob

		manifest := map[string]any{
			"schemaVersion": 2,
			"mediaType":     mediaTypeManifest,
			"config":        ociDescriptor{MediaType: mediaTypeConfig, Digest: cfgBlob.digest, Size: int64(len(cfgData))},
			"layers":        []ociDescriptor{{MediaType: mediaTypeLayer, Digest: layer.digest, Size: int64(len(layerData))}},
		}
		manData, err := json.Marshal(manifest)
		if err != nil {
			return err
		}
		manBlob := newBlob(manData)
		blobs[manBlob.digest] = manBlob

		tag := "latest"
		if i := strings.LastIndex(img.name, ":"); i > strings.LastIndex(img.name, "/") {
			tag = img.name[i+1:]
		}
		manifests = append(manifests, ociDescriptor{
			MediaType: mediaTypeManifest,
			Digest:    manBlob.digest,
			Size:      int64(len(manData)),
			Platform:  platform,
			Annotations: map[string]string{
				"io.containerd.image.name":          img.name,
				"org.opencontainers.image.ref.name": tag,
			},
		})
	}

	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeIndex,
		"manifests":     manifests,
	})
	if err != nil {
		return err
	}

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	mtime := time.Unix(0, 0)
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: mtime}); err != nil {
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
