package vm

// The offline pause and busybox images of the node image: one OCI image
// layout tar with a single layer (a static busybox and its applet
// symlinks), as test/e2e builds them. There is no registry; the image's
// vmtest-images.service imports the tar with `ctr -n k8s.io images import`
// before kubelet starts.

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
	"sort"
	"strings"
	"time"
)

const (
	pauseImage   = "localhost/nri-sysctl-test/pause:latest"
	busyboxImage = "localhost/nri-sysctl-test/busybox:latest"
	busyboxPath  = "/bin/busybox" // Debian's busybox-static on the build host
)

type blob struct {
	digest string
	data   []byte
}

func newBlob(data []byte) blob {
	sum := sha256.Sum256(data)
	return blob{digest: "sha256:" + hex.EncodeToString(sum[:]), data: data}
}

// busyboxLayer is an uncompressed layer tar: /bin/busybox, one symlink per
// applet, and the directories a container needs. Fixed mtimes and order make
// the tar, and so the node image's cache key, reproducible.
func busyboxLayer() ([]byte, error) {
	bb, err := os.ReadFile(busyboxPath)
	if err != nil {
		return nil, fmt.Errorf("read %s (apt-get install busybox-static): %w", busyboxPath, err)
	}
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
	mtime := time.Unix(0, 0)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := func(h *tar.Header) error { h.ModTime = mtime; return tw.WriteHeader(h) }
	for _, d := range []string{"bin", "dev", "etc", "proc", "sys", "run", "var", "root"} {
		if err := hdr(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}); err != nil {
			return nil, err
		}
	}
	if err := hdr(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777}); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		data []byte
		mode int64
	}{
		{"etc/passwd", []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644},
		{"etc/group", []byte("root:x:0:\n"), 0o644},
		{"bin/busybox", bb, 0o755},
	} {
		if err := hdr(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: f.mode, Size: int64(len(f.data))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	for _, a := range applets {
		if err := hdr(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeImageArchive writes the pause image (entrypoint `sleep infinity`,
// containerd's pinned sandbox image) and the busybox image to path.
func writeImageArchive(path string) error {
	layerData, err := busyboxLayer()
	if err != nil {
		return err
	}
	layer := newBlob(layerData)
	blobs := map[string]blob{layer.digest: layer}
	var manifests []map[string]any
	for _, img := range []struct {
		name       string
		entrypoint []string
		cmd        []string
	}{
		{pauseImage, []string{"/bin/sleep", "infinity"}, nil},
		{busyboxImage, nil, []string{"/bin/sh"}},
	} {
		cfg, err := json.Marshal(map[string]any{
			"architecture": "amd64",
			"os":           "linux",
			"config":       map[string]any{"Env": []string{"PATH=/bin"}, "Entrypoint": img.entrypoint, "Cmd": img.cmd, "WorkingDir": "/"},
			"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layer.digest}},
		})
		if err != nil {
			return err
		}
		cfgBlob := newBlob(cfg)
		blobs[cfgBlob.digest] = cfgBlob
		man, err := json.Marshal(map[string]any{
			"schemaVersion": 2,
			"mediaType":     "application/vnd.oci.image.manifest.v1+json",
			"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfgBlob.digest, "size": len(cfg)},
			"layers":        []map[string]any{{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer.digest, "size": len(layerData)}},
		})
		if err != nil {
			return err
		}
		manBlob := newBlob(man)
		blobs[manBlob.digest] = manBlob
		manifests = append(manifests, map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json",
			"digest":    manBlob.digest,
			"size":      len(man),
			"platform":  map[string]string{"architecture": "amd64", "os": "linux"},
			"annotations": map[string]string{
				"io.containerd.image.name":          img.name,
				"org.opencontainers.image.ref.name": img.name[strings.LastIndex(img.name, ":")+1:],
			},
		})
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests})
	if err != nil {
		return err
	}
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
	var digests []string
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
