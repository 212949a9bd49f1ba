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
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

const defaultRegistryVersion, defaultCraneVersion, defaultCosignVersion = "v3.1.2", "v0.22.1", "v2.6.5"

// localRegistry is one storage directory served by one or more registry
// processes, each on its own loopback port.
type localRegistry struct {
	bin, root, logDir string
	addr              string // the first process's host:port: the image's and the chart's
	config            string // the first process's configuration
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
	r.config = r.serve(t, k, "registry", r.addr)
	return r
}

// refusingListener holds a loopback port for a registry process that starts
// later: until it is closed, it accepts each connection and closes it at
// once, so that a pull fails fast, as from a registry that is down, and
// no other socket takes the port meanwhile.
func refusingListener(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l
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
// its configuration once it answers the distribution API's base endpoint.
func (r *localRegistry) serve(t *testing.T, k *k8sCluster, name, addr string) string {
	t.Helper()
	config := filepath.Join(k.dir, name+".yml")
	// A fixed secret, since two processes share the storage.
	yml := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n  secret: nri-sysctl-e2e\n", r.root, addr)
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
	return config
}

// loopbackOnly is a shell script that runs its arguments in the network
// namespace unshare made, with only loopback in it, beside a registry
// process serving the same storage on the same address: what runs there
// reaches that registry and nothing else (not this machine's other
// addresses, not the internet). The script is PID 1 of its own PID
// namespace, so that the registry ends when it does. (Its variables are
// not named REGISTRY_*: the registry reads those as its configuration.)
const loopbackOnly = `set -e
ip link set lo up
[ "$(ip -o link show up | wc -l)" = 1 ] || { echo "more than loopback up in the namespace: $(ip -o link show up)" >&2; exit 1; }
"$LOOPBACK_REGISTRY" serve "$LOOPBACK_REGISTRY_CONFIG" >>"$LOOPBACK_REGISTRY_LOG" 2>&1 &
i=0
until "$LOOPBACK_CRANE" catalog --insecure "$LOOPBACK_REGISTRY_ADDR" >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -lt 100 ] || { echo "the registry did not answer in the namespace" >&2; exit 1; }
	sleep 0.1
done
"$@"`

// inLoopbackNetns runs argv with env added, as loopbackOnly says, for at
// most five minutes. Its temporary files go below the cluster's directory,
// which the test removes: a killed script's trap does not run.
func (r *localRegistry) inLoopbackNetns(k *k8sCluster, env []string, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", append([]string{"--net", "--pid", "--fork", "--kill-child", "sh", "-c", loopbackOnly, "loopback-only"}, argv...)...)
	cmd.Env = append(append(os.Environ(), "LOOPBACK_REGISTRY="+r.bin, "LOOPBACK_REGISTRY_CONFIG="+r.config, "LOOPBACK_REGISTRY_ADDR="+r.addr,
		"LOOPBACK_REGISTRY_LOG="+filepath.Join(r.logDir, "registry-loopback-only.log"), "LOOPBACK_CRANE="+k.bins["crane"],
		"TMPDIR="+k.dir), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// cosignKeyPair makes a key pair for the test (no password) and returns
// the private key's path and the public key's.
func cosignKeyPair(t *testing.T, k *k8sCluster, name string) (string, string) {
	t.Helper()
	prefix := filepath.Join(k.dir, "cosign-"+name)
	cmd := exec.Command(k.bins["cosign"], "generate-key-pair", "--output-key-prefix", prefix)
	cmd.Env = append(os.Environ(), "COSIGN_PASSWORD=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	return prefix + ".key", prefix + ".pub"
}

// publish runs make publish's script against the registry as a release
// would, in a network namespace with only loopback: the image archive's
// whole index to addr/nri-sysctl:tag and the chart to oci://addr/charts,
// each signed with the key. It returns helm's arguments that name the
// chart there, and the chart's version.
func (r *localRegistry) publish(t *testing.T, h helmRun, archive, chart, tag, key string) ([]string, string) {
	t.Helper()
	env := append(h.ownEnv(), "HOME="+h.home, // crane's and cosign's (empty) configuration
		"COSIGN="+h.k.bins["cosign"], "COSIGN_KEY="+key, "COSIGN_PASSWORD=", "SBOM_DIR="+sbomDir(h.k))
	out, err := r.inLoopbackNetns(h.k, env, filepath.Join(h.k.c.repoRoot, "hack", "publish.sh"),
		r.addr, tag, archive, chart, h.k.bins["crane"], h.k.bins["helm"], "--plain-http")
	if err != nil {
		t.Fatalf("hack/publish.sh in a network namespace with only loopback: %v\n%s", err, out)
	}
	logf("published to %s with only loopback: %s", r.addr, strings.TrimSpace(lastLine(out)))
	version := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(chart), "nri-sysctl-"), ".tgz")
	return []string{"oci://" + r.addr + "/charts/nri-sysctl", "--version", version, "--plain-http"}, version
}

// sbomDir is where make notices-make wrote each architecture's SBOM.
func sbomDir(k *k8sCluster) string { return filepath.Join(k.c.repoRoot, "bin", "sbom") }

// verify runs hack/verify-published.sh, as a user would before installing,
// with the public key, in a network namespace with only loopback; the
// statements of the SBOM attestations it verified go to sbomOut.
func (r *localRegistry) verify(h helmRun, tag, chartVersion, pub, sbomOut string) (string, error) {
	return r.inLoopbackNetns(h.k, []string{"HOME=" + h.home, "SBOM_OUT=" + sbomOut}, filepath.Join(h.k.c.repoRoot, "hack", "verify-published.sh"),
		r.addr, tag, chartVersion, h.k.bins["cosign"], h.k.bins["crane"], pub, "--plain-http")
}

// checkAttestedSBOMs compares each platform's verified SBOM attestation
// (its in-toto statement, in dir) with the SBOM make notices-make wrote
// for that architecture's binary: the same document, about that
// platform's image in the index.
func (r *localRegistry) checkAttestedSBOMs(t *testing.T, k *k8sCluster, tag, dir string) {
	t.Helper()
	for _, arch := range []string{"amd64", "arm64"} {
		name := "nri-sysctl-linux-" + arch
		var statement struct {
			PredicateType string `json:"predicateType"`
			Subject       []struct {
				Digest map[string]string `json:"digest"`
			} `json:"subject"`
			Predicate any `json:"predicate"`
		}
		data, err := os.ReadFile(filepath.Join(dir, name+".intoto.json"))
		if err == nil {
			err = json.Unmarshal(data, &statement)
		}
		if err != nil {
			t.Fatalf("the attested SBOM of linux/%s: %v\n%s", arch, err, data)
		}
		var built any
		data, err = os.ReadFile(filepath.Join(sbomDir(k), name+".cdx.json"))
		if err == nil {
			err = json.Unmarshal(data, &built)
		}
		if err != nil {
			t.Fatal(err)
		}
		platform := r.crane(t, k, "digest", "--platform", "linux/"+arch, r.addr+"/nri-sysctl:"+tag)
		if len(statement.Subject) != 1 || "sha256:"+statement.Subject[0].Digest["sha256"] != platform {
			t.Errorf("linux/%s: the SBOM attestation's subject is %+v, want the platform's image %s", arch, statement.Subject, platform)
		}
		if !strings.Contains(statement.PredicateType, "cyclonedx") || !reflect.DeepEqual(statement.Predicate, built) {
			t.Errorf("linux/%s: the attested SBOM (%s) is not %s/%s.cdx.json", arch, statement.PredicateType, sbomDir(k), name)
		}
	}
	logf("each platform's image has its architecture's SBOM attached, signed, the same as bin/sbom's")
}

// crane runs crane against the registry (plain HTTP) and returns what it
// printed.
func (r *localRegistry) crane(t *testing.T, k *k8sCluster, args ...string) string {
	t.Helper()
	var stderr strings.Builder
	cmd := exec.Command(k.bins["crane"], append(args, "--insecure")...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("crane %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// tag gives the image another tag in the registry (crane tag: no pull, no push).
func (r *localRegistry) tag(t *testing.T, k *k8sCluster, from, to string) {
	t.Helper()
	r.crane(t, k, "tag", r.addr+"/"+from, to)
}

// indexDigest is the digest of the image index the registry serves for ref.
func (r *localRegistry) indexDigest(t *testing.T, k *k8sCluster, ref string) string {
	t.Helper()
	return r.crane(t, k, "digest", r.addr+"/"+ref)
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

// checkSignedSums signs a release directory's SHA256SUMS (of the given
// files) as make release does (hack/sign-sums.sh) and checks it as a user
// would (hack/verify-sums.sh), both with only loopback: it must pass with
// the key's public half, and fail with another key and after a file
// changed.
func (r *localRegistry) checkSignedSums(t *testing.T, h helmRun, key, pub, otherPub string, files ...string) {
	t.Helper()
	dir := filepath.Join(h.k.dir, "release")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sums := exec.Command("sh", "-c", "sha256sum -- * >SHA256SUMS")
	sums.Dir = dir
	if out, err := sums.CombinedOutput(); err != nil {
		t.Fatalf("sha256sum: %v\n%s", err, out)
	}
	hack := filepath.Join(h.k.c.repoRoot, "hack")
	if out, err := r.inLoopbackNetns(h.k, []string{"COSIGN_KEY=" + key, "COSIGN_PASSWORD=", "HOME=" + h.home}, filepath.Join(hack, "sign-sums.sh"), h.k.bins["cosign"], dir); err != nil {
		t.Fatalf("hack/sign-sums.sh with only loopback: %v\n%s", err, out)
	}
	verify := func(key string) (string, error) {
		return r.inLoopbackNetns(h.k, []string{"HOME=" + h.home}, filepath.Join(hack, "verify-sums.sh"), h.k.bins["cosign"], key, dir)
	}
	if out, err := verify(pub); err != nil {
		t.Fatalf("hack/verify-sums.sh with the release's key: %v\n%s", err, out)
	}
	if out, err := verify(otherPub); err == nil || !strings.Contains(out, "its signature is not by") {
		t.Fatalf("hack/verify-sums.sh with another key: want it refused, got %v\n%s", err, out)
	}
	changed := filepath.Join(dir, filepath.Base(files[len(files)-1]))
	f, err := os.OpenFile(changed, os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.Write([]byte{0})
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	if out, err := verify(pub); err == nil || !strings.Contains(out, "a file differs") {
		t.Fatalf("hack/verify-sums.sh after %s changed: want it refused, got %v\n%s", changed, err, out)
	}
	logf("SHA256SUMS of %d files signed and verified with only loopback; another key and a changed file refused", len(files))
}
