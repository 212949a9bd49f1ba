// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

// CRI helpers: pods and containers are driven with crictl, the same API
// kubelet uses, so NRI hooks run exactly as on a node.

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// CRI NamespaceMode values (runtime.v1.NamespaceMode).
const (
	nsModePod  = 0
	nsModeNode = 2
)

// PodSpec describes a pod sandbox to run.
type PodSpec struct {
	Name           string // default: derived from the test name
	Namespace      string // default: "e2e"
	Labels         map[string]string
	Annotations    map[string]string
	Sysctls        map[string]string // the pod's own linux.sysctls
	HostNetwork    bool
	HostIPC        bool
	RuntimeHandler string // crictl runp --runtime; "" = containerd's default
	// UserNamespace gives the pod its own user namespace (hostUsers:
	// false), mapping container IDs 0-65535 to host IDs from 100000.
	UserNamespace bool
}

// Pod is a running pod sandbox.
type Pod struct {
	ID         string
	Spec       PodSpec
	ConfigPath string // pod config JSON, needed again by `crictl create`
	LogDir     string
}

// CRI JSON shapes (the field names crictl accepts).
type criMetadata struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	UID       string `json:"uid,omitempty"`
	Attempt   uint32 `json:"attempt"`
}

type criNamespaceOptions struct {
	Network       int               `json:"network"`
	Pid           int               `json:"pid"`
	Ipc           int               `json:"ipc"`
	UsernsOptions *criUsernsOptions `json:"userns_options,omitempty"`
}

type criIDMapping struct {
	HostID      uint32 `json:"host_id"`
	ContainerID uint32 `json:"container_id"`
	Length      uint32 `json:"length"`
}

type criUsernsOptions struct {
	Mode int            `json:"mode"` // 0 = POD: the pod's own user namespace
	UIDs []criIDMapping `json:"uids"`
	GIDs []criIDMapping `json:"gids"`
}

type criPodConfig struct {
	Metadata     criMetadata       `json:"metadata"`
	Hostname     string            `json:"hostname,omitempty"`
	LogDirectory string            `json:"log_directory"`
	Labels       map[string]string `json:"labels,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	Linux        struct {
		Sysctls         map[string]string `json:"sysctls,omitempty"`
		SecurityContext struct {
			NamespaceOptions criNamespaceOptions `json:"namespace_options"`
		} `json:"security_context"`
	} `json:"linux"`
}

type criContainerConfig struct {
	Metadata criMetadata `json:"metadata"`
	Image    struct {
		Image string `json:"image"`
	} `json:"image"`
	Command []string          `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	LogPath string            `json:"log_path"`
	Labels  map[string]string `json:"labels,omitempty"`
	Linux   struct {
		SecurityContext *struct {
			NamespaceOptions criNamespaceOptions `json:"namespace_options"`
		} `json:"security_context,omitempty"`
	} `json:"linux"`
}

func randomUID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// dnsLabel makes a string usable as a pod name.
func dnsLabel(s string) string {
	s = strings.ToLower(s)
	var b strings.Builder
	for _, r := range s {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-")
	if len(out) > 40 {
		out = strings.Trim(out[len(out)-40:], "-")
	}
	if out == "" {
		out = "pod"
	}
	return out
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

func (c *cluster) runPodErr(spec PodSpec) (*Pod, error) {
	if spec.Name == "" {
		spec.Name = "pod"
	}
	if spec.Namespace == "" {
		spec.Namespace = "e2e"
	}
	uid := randomUID()
	var cfg criPodConfig
	cfg.Metadata = criMetadata{Name: spec.Name, Namespace: spec.Namespace, UID: uid}
	cfg.Hostname = dnsLabel(spec.Name)
	cfg.LogDirectory = filepath.Join(c.tmp, "pods", spec.Namespace+"_"+spec.Name+"_"+uid)
	cfg.Labels = spec.Labels
	cfg.Annotations = spec.Annotations
	cfg.Linux.Sysctls = spec.Sysctls
	ns := &cfg.Linux.SecurityContext.NamespaceOptions
	ns.Network, ns.Pid, ns.Ipc = nsModePod, 1 /* CONTAINER */, nsModePod
	if spec.HostNetwork {
		ns.Network = nsModeNode
		cfg.Hostname = "" // a hostNetwork pod keeps the node's hostname
	}
	if spec.HostIPC {
		ns.Ipc = nsModeNode
	}
	if spec.UserNamespace {
		mapping := []criIDMapping{{HostID: 100000, ContainerID: 0, Length: 65536}}
		ns.UsernsOptions = &criUsernsOptions{Mode: 0, UIDs: mapping, GIDs: mapping}
	}
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(c.workDir, "pod-"+uid+".json")
	if err := writeJSON(path, cfg); err != nil {
		return nil, err
	}
	args := []string{"runp"}
	if spec.RuntimeHandler != "" {
		args = append(args, "--runtime", spec.RuntimeHandler)
	}
	out, err := c.crictlRaw(append(args, path)...)
	if err != nil {
		return nil, fmt.Errorf("run pod %s/%s: %w", spec.Namespace, spec.Name, err)
	}
	return &Pod{ID: strings.TrimSpace(out), Spec: spec, ConfigPath: path, LogDir: cfg.LogDirectory}, nil
}

// runPod starts a pod sandbox and removes it when the test ends.
func runPod(t *testing.T, spec PodSpec) *Pod {
	t.Helper()
	c := getCluster(t)
	if spec.Name == "" {
		spec.Name = dnsLabel(t.Name())
	}
	pod, err := c.runPodErr(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.removePod(pod.ID) })
	return pod
}

// removePod stops and removes a pod; errors are only logged.
//
// Its containers are removed before it, as the kubelet does: containerd's
// RemovePodSandbox (every line here, 1.7.36 to 2.4.2) removes the
// containers left in a pod while it blocks NRI's plugin sync, and each
// removal blocks it again; a plugin registering in between deadlocks
// containerd's CRI (make soak, whose plugin restarts while pods go, met
// it).
func (c *cluster) removePod(id string) {
	if _, err := c.crictlRaw("stopp", id); err != nil {
		logf("stop pod %s: %v", id, err)
	}
	if out, err := c.crictlRaw("ps", "-a", "-q", "--pod", id); err != nil {
		logf("list the containers of pod %s: %v", id, err)
	} else if ids := strings.Fields(out); len(ids) > 0 {
		if _, err := c.crictlRaw(append([]string{"rm", "-f"}, ids...)...); err != nil {
			logf("remove the containers of pod %s: %v", id, err)
		}
	}
	if _, err := c.crictlRaw("rmp", "-f", id); err != nil {
		logf("remove pod %s: %v", id, err)
	}
}

func (c *cluster) createContainerErr(pod *Pod, name string, command []string) (string, error) {
	var cfg criContainerConfig
	cfg.Metadata = criMetadata{Name: name}
	cfg.Image.Image = busyboxImage
	cfg.Command = command
	cfg.LogPath = name + ".log"
	if pod.Spec.UserNamespace {
		// A container must repeat its pod's user namespace settings.
		var podCfg criPodConfig
		if data, err := os.ReadFile(pod.ConfigPath); err != nil {
			return "", err
		} else if err := json.Unmarshal(data, &podCfg); err != nil {
			return "", err
		}
		cfg.Linux.SecurityContext = &struct {
			NamespaceOptions criNamespaceOptions `json:"namespace_options"`
		}{podCfg.Linux.SecurityContext.NamespaceOptions}
	}
	path := filepath.Join(c.workDir, "ctr-"+randomUID()+".json")
	if err := writeJSON(path, cfg); err != nil {
		return "", err
	}
	out, err := c.crictlRaw("create", pod.ID, path, pod.ConfigPath)
	if err != nil {
		return "", fmt.Errorf("create container %s in pod %s: %w", name, pod.Spec.Name, err)
	}
	return strings.TrimSpace(out), nil
}

// createContainer creates (but does not start) a container running command
// (default: sleep 3600) from the busybox image.
func createContainer(t *testing.T, pod *Pod, name string, command ...string) string {
	t.Helper()
	if len(command) == 0 {
		command = []string{"sleep", "3600"}
	}
	id, err := getCluster(t).createContainerErr(pod, name, command)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func startContainer(t *testing.T, id string) {
	t.Helper()
	if _, err := getCluster(t).crictlRaw("start", id); err != nil {
		t.Fatal(err)
	}
}

// runContainer creates and starts a container; see createContainer.
func runContainer(t *testing.T, pod *Pod, name string, command ...string) string {
	t.Helper()
	id := createContainer(t, pod, name, command...)
	startContainer(t, id)
	return id
}

// execIn runs a command in a running container (CRI ExecSync) and returns its
// trimmed stdout.
func execIn(t *testing.T, id string, command ...string) string {
	t.Helper()
	out, err := getCluster(t).crictlRaw(append([]string{"exec", "-s", id}, command...)...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// readSysctl reads one sysctl inside a running container.
func readSysctl(t *testing.T, id, key string) string {
	t.Helper()
	return execIn(t, id, "cat", "/proc/sys/"+sysctlPath(key))
}

// sysctlScript prints "key=value" for each key given as argument, reading
// /proc/sys inside the container.
const sysctlScript = `for k in "$@"; do p=$(echo "$k" | tr . /); printf '%s=%s\n' "$k" "$(cat /proc/sys/$p)"; done`

func parseKeyValues(out string) map[string]string {
	vals := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok {
			vals[k] = strings.TrimSpace(v)
		}
	}
	return vals
}

func (c *cluster) readSysctlsErr(id string, keys ...string) (map[string]string, error) {
	args := append([]string{"exec", "-s", id, "sh", "-c", sysctlScript, "sh"}, keys...)
	out, err := c.crictlRaw(args...)
	if err != nil {
		return nil, err
	}
	vals := parseKeyValues(out)
	for _, k := range keys {
		if _, ok := vals[k]; !ok {
			return nil, fmt.Errorf("no value for %s in output %q", k, out)
		}
	}
	return vals, nil
}

// readSysctls reads several sysctls inside a running container with one exec.
func readSysctls(t *testing.T, id string, keys ...string) map[string]string {
	t.Helper()
	vals, err := getCluster(t).readSysctlsErr(id, keys...)
	if err != nil {
		t.Fatal(err)
	}
	return vals
}

// inspectContainer returns `crictl inspect` output as generic JSON.
func inspectContainer(t *testing.T, id string) map[string]any {
	t.Helper()
	return getCluster(t).inspectContainer(t, id)
}

func (c *cluster) inspectContainer(t *testing.T, id string) map[string]any {
	t.Helper()
	out, err := c.crictlRaw("inspect", "-o", "json", id)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("parse crictl inspect output: %v\n%s", err, out)
	}
	return v
}

// jsonPath walks nested JSON objects.
func jsonPath(v any, keys ...string) (any, bool) {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// containerAnnotations returns the annotations of the container's OCI spec
// (crictl inspect: info.runtimeSpec.annotations).
func containerAnnotations(t *testing.T, id string) map[string]string {
	t.Helper()
	return getCluster(t).containerAnnotations(t, id)
}

func (c *cluster) containerAnnotations(t *testing.T, id string) map[string]string {
	t.Helper()
	v, ok := jsonPath(c.inspectContainer(t, id), "info", "runtimeSpec", "annotations")
	if !ok {
		t.Fatalf("crictl inspect %s: no info.runtimeSpec.annotations", id)
	}
	out := map[string]string{}
	for k, val := range v.(map[string]any) {
		out[k] = fmt.Sprint(val)
	}
	return out
}

// whyLacking says what a container that lacks its defaults was told, and
// what containerd logged of the plugin: the plugin's annotations (none: no
// answer of the plugin reached containerd) and containerd's lines about
// plugins it closed or found missing.
func (c *cluster) whyLacking(t *testing.T, id string) string {
	t.Helper()
	var b strings.Builder
	ann := c.containerAnnotations(t, id)
	fmt.Fprintf(&b, "  the plugin's annotations on container %s:", id)
	found := false
	for _, k := range slices.Sorted(maps.Keys(ann)) {
		if strings.HasPrefix(k, "nri-sysctl.io/") {
			fmt.Fprintf(&b, " %s=%q", k, ann[k])
			found = true
		}
	}
	if !found {
		b.WriteString(" none: no answer of the plugin reached containerd")
	}
	b.WriteString("\n  containerd's log about plugins:")
	data, err := os.ReadFile(c.logPath)
	if err != nil {
		fmt.Fprintf(&b, " (cannot read %s: %v)", c.logPath, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "closing plugin") || strings.Contains(line, refusedNoPlugin) || strings.Contains(line, "failed to handle") {
			b.WriteString("\n    " + line)
		}
	}
	return b.String()
}

// containerSpecSysctls returns linux.sysctl of the container's OCI spec.
func containerSpecSysctls(t *testing.T, id string) map[string]string {
	t.Helper()
	out := map[string]string{}
	v, ok := jsonPath(inspectContainer(t, id), "info", "runtimeSpec", "linux", "sysctl")
	if !ok {
		return out
	}
	for k, val := range v.(map[string]any) {
		out[k] = fmt.Sprint(val)
	}
	return out
}

// containerState returns the CRI state (CONTAINER_RUNNING, CONTAINER_EXITED...).
func containerState(t *testing.T, id string) string {
	t.Helper()
	v, _ := jsonPath(inspectContainer(t, id), "status", "state")
	s, _ := v.(string)
	return s
}

// waitExited waits for a container to exit and returns its exit code.
func waitExited(t *testing.T, id string, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := inspectContainer(t, id)
		state, _ := jsonPath(st, "status", "state")
		if state == "CONTAINER_EXITED" {
			code, _ := jsonPath(st, "status", "exitCode")
			f, _ := code.(float64)
			return int(f)
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s not exited after %s (state %v)", id, timeout, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// containerLogs returns what the container wrote to stdout and stderr.
func containerLogs(t *testing.T, id string) string {
	t.Helper()
	out, err := getCluster(t).crictlRaw("logs", id)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// wantSysctls compares values read in a container with the expected ones,
// and tells whether they all matched.
func wantSysctls(t *testing.T, what string, got, want map[string]string) (ok bool) {
	t.Helper()
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	ok = true
	for _, k := range keys {
		if got[k] != want[k] {
			t.Errorf("%s: %s = %q, want %q", what, k, got[k], want[k])
			ok = false
		}
	}
	return ok
}
