// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

// The two-node test's registry: the CNCF distribution registry (test/setup.sh
// --k8s builds it from the Go module proxy) on 127.0.0.1, to which
// hack/publish.sh (make publish) pushes the image archive's two-platform
// index and the chart, so that the nodes pull the image by tag, each
// taking its own platform from the index, and helm installs the chart from
// oci://. Both nodes share the host's network namespace; each node's
// containerd reaches the registry over plain HTTP through a hosts.toml in
// its own hosts directory (registryHostsDir), as a node admin would write.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const defaultRegistryVersion, defaultCraneVersion = "v3.1.2", "v0.22.1"

// localRegistry is one storage directory served by one or more registry
// processes, each on its own loopback port.
type localRegistry struct {
	bin, root, logDir string
	addr              string // the first process's host:port: the image's and the chart's
	// stopAtEnd is the test's Cleanup, not a subtest's: every process
	// serves until the test ends, whichever subtest started it.
	stopAtEnd func(func())
}

// startRegistry serves a new storage directory below the cluster's own on
// a free loopback port; the test's cleanup stops it by its PID.
func startRegistry(t *testing.T, k *k8sCluster) *localRegistry {
	t.Helper()
	r := &localRegistry{bin: k.bins["registry"], root: filepath.Join(k.dir, "registry"), logDir: k.logDir, stopAtEnd: t.Cleanup}
	r.addr = loopbackAddr(t)
	r.serve(t, k, "registry", r.addr)
	return r
}

// loopbackAddr is a free port on 127.0.0.1, as host:port.
func loopbackAddr(t *testing.T) string {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// serve starts a registry process for the storage on addr, and returns
// once it answers the distribution API's base endpoint.
func (r *localRegistry) serve(t *testing.T, k *k8sCluster, name, addr string) {
	t.Helper()
	config := filepath.Join(k.dir, name+".yml")
	// delete: the upgrade subtest retags; a fixed secret, since two
	// processes share the storage.
	yml := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n  secret: nri-sysctl-e2e\n", r.root, addr)
	if err := os.WriteFile(config, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := startDaemon(name, r.logDir, r.bin, "serve", config)
	if err != nil {
		t.Fatal(err)
	}
	r.stopAtEnd(d.stop)
	waitUntil(t, 30*time.Second, name+" on "+addr, func() (bool, string) {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// publish runs make publish's script against the registry, as a release
// would: the image archive's whole index to addr/nri-sysctl:tag, the
// chart to oci://addr/charts. It returns helm's arguments that name the
// chart there.
func (r *localRegistry) publish(t *testing.T, h helmRun, archive, chart, tag string) []string {
	t.Helper()
	cmd := exec.Command(filepath.Join(h.k.c.repoRoot, "hack", "publish.sh"), r.addr, tag, archive, chart, h.k.bins["crane"], h.k.bins["helm"], "--plain-http")
	cmd.Env = append(h.env(), "HOME="+h.home) // crane's (empty) docker config
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/publish.sh: %v\n%s", err, out)
	}
	logf("published to %s: %s", r.addr, strings.TrimSpace(lastLine(string(out))))
	version := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(chart), "nri-sysctl-"), ".tgz")
	return []string{"oci://" + r.addr + "/charts/nri-sysctl", "--version", version, "--plain-http"}
}

// tag gives the image another tag in the registry (crane tag: no pull, no push).
func (r *localRegistry) tag(t *testing.T, k *k8sCluster, from, to string) {
	t.Helper()
	if out, err := exec.Command(k.bins["crane"], "tag", "--insecure", r.addr+"/"+from, to).CombinedOutput(); err != nil {
		t.Fatalf("crane tag %s %s: %v\n%s", from, to, err, out)
	}
}

// indexDigest is the digest of the image index the registry serves for ref.
func (r *localRegistry) indexDigest(t *testing.T, k *k8sCluster, ref string) string {
	t.Helper()
	out, err := exec.Command(k.bins["crane"], "digest", "--insecure", r.addr+"/"+ref).Output()
	if err != nil {
		t.Fatalf("crane digest %s: %v", ref, err)
	}
	return strings.TrimSpace(string(out))
}

// pullFrom makes node c pull images named registry (host:port) from
// server, plain HTTP, through a hosts.toml in c's hosts directory.
func pullFrom(t *testing.T, c *cluster, registry, server string) {
	t.Helper()
	dir := filepath.Join(c.registryHostsDir(), registry)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+server, "http://"+server)
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkPulledImage reads, in node c's containerd, the image ref: pulled
// from the registry by its tag, the index's digest, this machine's
// platform.
func checkPulledImage(t *testing.T, node string, c *cluster, repo, tag, indexDigest string) {
	t.Helper()
	ref := repo + ":" + tag
	out, err := c.crictlRaw("inspecti", "-o", "json", ref)
	if err != nil {
		t.Fatalf("%s: crictl inspecti %s: %v\n%s", node, ref, err, out)
	}
	var v struct {
		Status struct {
			RepoTags    []string `json:"repoTags"`
			RepoDigests []string `json:"repoDigests"`
		} `json:"status"`
		Info struct {
			ImageSpec struct {
				Architecture string `json:"architecture"`
				OS           string `json:"os"`
			} `json:"imageSpec"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%s: crictl inspecti %s: %v\n%s", node, ref, err, out)
	}
	wantDigest := repo + "@" + indexDigest
	if !slices.Contains(v.Status.RepoDigests, wantDigest) || !slices.Contains(v.Status.RepoTags, ref) {
		t.Errorf("%s: image %s has tags %v digests %v, want the tag and %s (pulled from the registry)", node, ref, v.Status.RepoTags, v.Status.RepoDigests, wantDigest)
	}
	if got := v.Info.ImageSpec.OS + "/" + v.Info.ImageSpec.Architecture; got != "linux/"+goarch() {
		t.Errorf("%s: image %s is %s, want linux/%s (the index's entry for this node)", node, ref, got, goarch())
	}
	logf("%s: pulled %s (%s, %s/%s)", node, ref, indexDigest, v.Info.ImageSpec.OS, v.Info.ImageSpec.Architecture)
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndex(s, "\n")+1:]
}
