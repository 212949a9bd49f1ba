// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package chart checks the Helm chart in config/helm/nri-sysctl with the
// helm that test/setup.sh builds: helm lint, and helm template rendered
// per mode, read back and checked field by field; and that the plain
// manifests in config/kubernetes are what the chart renders.
package chart

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const (
	chartDir = "../../config/helm/nri-sysctl"
	// kubeVersion is what the tests render for (the chart wants >= 1.30).
	kubeVersion = "v1.37.2"
)

// helmPath finds helm in the test cache (test/setup.sh builds it).
func helmPath(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("NRI_SYSCTL_CACHE")
	if cache == "" {
		cache = "/var/cache/nri-sysctl-e2e"
	}
	version := os.Getenv("NRI_SYSCTL_HELM_VERSION")
	if version == "" {
		version = "v3.22.0"
	}
	p := filepath.Join(cache, "helm-"+version, "bin", "helm")
	if _, err := os.Stat(p); err != nil {
		// make test-all sets it: there, setup has just built helm, and a
		// skip would pass these checks without running them.
		if os.Getenv("NRI_SYSCTL_REQUIRE_HELM") == "1" {
			t.Fatalf("%s is missing, and NRI_SYSCTL_REQUIRE_HELM=1 (make test-all) forbids skipping the chart checks: does test/setup.sh build this helm version?", p)
		}
		t.Skipf("\n\n*** SKIPPING the chart checks: %s is missing; run `sudo test/setup.sh` ***\n", p)
	}
	return p
}

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmPath(t), args...)
	// No user's helm config or cache: a clean, offline run.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

// render runs helm template with --set pairs and returns the objects.
func render(t *testing.T, sets ...string) []obj {
	t.Helper()
	out, err := renderText(t, sets...)
	if err != nil {
		t.Fatal(err)
	}
	return decodeAll(t, out)
}

func renderText(t *testing.T, sets ...string) (string, error) {
	args := []string{"template", "nri-sysctl", chartDir, "--namespace", "nri-sysctl", "--kube-version", kubeVersion}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return helm(t, args...)
}

type obj = map[string]any

func decodeAll(t *testing.T, text string) []obj {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(text))
	var objs []obj
	for {
		var o obj
		err := dec.Decode(&o)
		if errors.Is(err, os.ErrClosed) || (err != nil && err.Error() == "EOF") {
			break
		}
		if err != nil {
			t.Fatalf("decoding rendered YAML: %v\n%s", err, text)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
	return objs
}

// get walks a path of map keys and list indexes.
func get(o any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := o.(obj)
			if !ok {
				return nil
			}
			o = m[k]
		case int:
			l, ok := o.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			o = l[k]
		}
	}
	return o
}

func find(t *testing.T, objs []obj, kind string) obj {
	t.Helper()
	for _, o := range objs {
		if o["kind"] == kind {
			return o
		}
	}
	return nil
}

type daemonSet struct {
	t    *testing.T
	pod  obj
	ctr  obj
	args []string
}

func renderDaemonSet(t *testing.T, sets ...string) (daemonSet, []obj) {
	t.Helper()
	objs := render(t, sets...)
	ds := find(t, objs, "DaemonSet")
	if ds == nil {
		t.Fatalf("no DaemonSet rendered")
	}
	d := daemonSet{t: t, pod: get(ds, "spec", "template", "spec").(obj)}
	ctrs := get(d.pod, "containers").([]any)
	if len(ctrs) != 1 {
		t.Fatalf("%d containers, want 1", len(ctrs))
	}
	d.ctr = ctrs[0].(obj)
	for _, a := range get(d.ctr, "args").([]any) {
		d.args = append(d.args, a.(string))
	}
	return d, objs
}

// hostDirs maps each hostPath volume's path to its mount path and type.
func (d daemonSet) hostDirs() map[string][2]string {
	mounts := map[string]string{}
	for _, m := range get(d.ctr, "volumeMounts").([]any) {
		mounts[m.(obj)["name"].(string)] = m.(obj)["mountPath"].(string)
	}
	dirs := map[string][2]string{}
	for _, v := range get(d.pod, "volumes").([]any) {
		hp, ok := v.(obj)["hostPath"].(obj)
		if !ok {
			continue
		}
		dirs[hp["path"].(string)] = [2]string{mounts[v.(obj)["name"].(string)], fmt.Sprint(hp["type"])}
	}
	return dirs
}

func (d daemonSet) sc(key string) any { return get(d.ctr, "securityContext", key) }

func (d daemonSet) addedCaps() []string {
	var caps []string
	for _, c := range asList(get(d.ctr, "securityContext", "capabilities", "add")) {
		caps = append(caps, c.(string))
	}
	slices.Sort(caps)
	return caps
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func (d daemonSet) hasArg(a string) bool { return slices.Contains(d.args, a) }

func TestHelmLint(t *testing.T) {
	for _, sets := range [][]string{nil, {"mode=namespace"}, {"removeTaint=false", "metrics.enabled=false"}, {"nodePolicy.enabled=false", "tolerateMissingPluginsAnnotation="}, {"kernelCheck=false", "events.enabled=false", "lastGoodConfigDir="},
		{"podMonitor.enabled=true", "prometheusRule.enabled=true", "grafanaDashboard.enabled=true"}} {
		args := []string{"lint", "--strict", chartDir, "--kube-version", kubeVersion}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		out, err := helm(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "0 chart(s) failed") {
			t.Fatalf("helm lint %v:\n%s", sets, out)
		}
	}
}

// Both modes: directories (not socket files) mounted, the node-critical
// priority, every taint tolerated, Linux nodes only, root without
// privilege, the config from a ConfigMap directory.
func checkCommon(t *testing.T, d daemonSet) {
	t.Helper()
	dirs := d.hostDirs()
	for _, dir := range []string{"/var/run/nri", "/run/containerd"} {
		got, ok := dirs[dir]
		if !ok || got != [2]string{dir, "Directory"} {
			t.Errorf("hostPath %s: %v (present %v); want mounted at the same path, type Directory (hostPaths: %v)", dir, got, ok, dirs)
		}
	}
	for dir := range dirs {
		if strings.HasSuffix(dir, ".sock") {
			t.Errorf("a socket file is mounted: %s", dir)
		}
	}
	if got := d.pod["priorityClassName"]; got != "system-node-critical" {
		t.Errorf("priorityClassName %v", got)
	}
	if got := get(d.pod, "tolerations"); !reflect.DeepEqual(got, []any{obj{"operator": "Exists"}}) {
		t.Errorf("tolerations %v, want [{operator: Exists}]", got)
	}
	if got := get(d.pod, "nodeSelector", "kubernetes.io/os"); got != "linux" {
		t.Errorf("nodeSelector kubernetes.io/os = %v", got)
	}
	for key, want := range map[string]any{"privileged": false, "readOnlyRootFilesystem": true, "runAsUser": 0, "runAsNonRoot": false} {
		if got := d.sc(key); got != want {
			t.Errorf("securityContext.%s = %v, want %v", key, got, want)
		}
	}
	if got := get(d.ctr, "securityContext", "capabilities", "drop"); !reflect.DeepEqual(got, []any{"ALL"}) {
		t.Errorf("capabilities.drop = %v, want [ALL]", got)
	}
	if !d.hasArg("--config=/etc/nri-sysctl/config.yaml") || !d.hasArg("--watch-config=5s") {
		t.Errorf("args %v: want the ConfigMap's file and --watch-config", d.args)
	}
	var cfgVol obj
	for _, v := range get(d.pod, "volumes").([]any) {
		if v.(obj)["name"] == "config" {
			cfgVol = v.(obj)
		}
	}
	if get(cfgVol, "configMap", "name") != "nri-sysctl" {
		t.Errorf("config volume %v, want the ConfigMap nri-sysctl", cfgVol)
	}
	if get(d.pod, "hostNetwork") == true || get(d.pod, "hostIPC") == true {
		t.Errorf("host network or IPC namespace: %v", d.pod)
	}
}

// The privileges the kernel check needs (the chart README "What the kernel check
// costs"): its throw-away namespaces and /proc/sys remount, the user
// namespace probe's id mapping, and no AppArmor confinement.
func checkKernelCheckPrivileges(t *testing.T, d daemonSet) {
	t.Helper()
	caps := d.addedCaps()
	for _, c := range []string{"SETGID", "SETUID", "SYS_ADMIN"} {
		if !slices.Contains(caps, c) {
			t.Errorf("capabilities.add %v lacks %s", caps, c)
		}
	}
	if got := d.sc("allowPrivilegeEscalation"); got != true {
		t.Errorf("allowPrivilegeEscalation = %v, want true (Kubernetes refuses false with CAP_SYS_ADMIN)", got)
	}
	if got := get(d.ctr, "securityContext", "appArmorProfile", "type"); got != "Unconfined" {
		t.Errorf("appArmorProfile.type = %v, want Unconfined (the default profile denies mount and /proc/sys writes)", got)
	}
	if d.hasArg("--skip-kernel-check") {
		t.Errorf("args %v: the kernel check is left out", d.args)
	}
}

// envFieldRefs maps each env entry set from the downward API to its field.
func (d daemonSet) envFieldRefs() map[string]any {
	refs := map[string]any{}
	for _, e := range asList(get(d.ctr, "env")) {
		if f := get(e, "valueFrom", "fieldRef", "fieldPath"); f != nil {
			refs[get(e, "name").(string)] = f
		}
	}
	return refs
}

// The defaults but runningPods: keep (TestTemplateRunningPods has
// converge's privileges): the kernel check on, in spec mode too, with what it
// needs; the last good config kept in a hostPath directory; Events on the
// plugin's pod, with a namespaced Role, the token and the pod's identity.
func TestTemplateSpecMode(t *testing.T) {
	d, objs := renderDaemonSet(t, "runningPods=keep")
	checkCommon(t, d)
	checkKernelCheckPrivileges(t, d)
	if want := []string{"SETGID", "SETUID", "SYS_ADMIN"}; !reflect.DeepEqual(d.addedCaps(), want) {
		t.Errorf("spec mode adds %v, want exactly %v", d.addedCaps(), want)
	}
	if get(d.pod, "hostPID") == true {
		t.Error("spec mode has hostPID")
	}
	for _, a := range []string{"--mode=spec", "--remove-taint", "--metrics-address=:9183", "--containerd-address=/run/containerd/containerd.sock", "--nri-socket=/var/run/nri/nri.sock",
		"--last-good-config=/var/lib/nri-sysctl/last-good-config.yaml", "--kubernetes-events"} {
		if !d.hasArg(a) {
			t.Errorf("args %v lack %s", d.args, a)
		}
	}
	if got := get(d.ctr, "livenessProbe", "httpGet", "path"); got != "/livez" {
		t.Errorf("livenessProbe %v, want /livez (never /healthz, which is 503 while containerd restarts)", get(d.ctr, "livenessProbe"))
	}
	if got := get(d.ctr, "readinessProbe", "httpGet", "path"); got != "/healthz" {
		t.Errorf("readinessProbe %v, want /healthz", get(d.ctr, "readinessProbe"))
	}
	dirs := d.hostDirs()
	if len(dirs) != 3 || dirs["/var/lib/nri-sysctl"] != [2]string{"/var/lib/nri-sysctl", "DirectoryOrCreate"} {
		t.Errorf("hostPath volumes %v, want the NRI and containerd socket directories and /var/lib/nri-sysctl (DirectoryOrCreate)", dirs)
	}
	for _, m := range asList(get(d.ctr, "volumeMounts")) {
		if get(m, "mountPath") == "/var/lib/nri-sysctl" && get(m, "readOnly") == true {
			t.Error("the last good config's directory is mounted read-only")
		}
	}
	if get(d.pod, "automountServiceAccountToken") != true {
		t.Error("the token is needed to remove the taint and to send Events")
	}
	if want := map[string]any{"NODE_NAME": "spec.nodeName", "POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "POD_UID": "metadata.uid"}; !reflect.DeepEqual(d.envFieldRefs(), want) {
		t.Errorf("downward API env %v, want %v", d.envFieldRefs(), want)
	}
	role := find(t, objs, "ClusterRole")
	if role == nil {
		t.Fatal("no ClusterRole")
	}
	want := []any{obj{"apiGroups": []any{""}, "resources": []any{"nodes"}, "verbs": []any{"get", "patch"}}}
	if got := role["rules"]; !reflect.DeepEqual(got, want) {
		t.Errorf("ClusterRole rules %v, want %v", got, want)
	}
	if find(t, objs, "ClusterRoleBinding") == nil || find(t, objs, "ConfigMap") == nil || find(t, objs, "ServiceAccount") == nil {
		t.Error("missing ClusterRoleBinding, ConfigMap or ServiceAccount")
	}
	checkEventsRole(t, objs)
}

// The Events Role: create on core events, in the release's namespace
// only, bound to the plugin's service account.
func checkEventsRole(t *testing.T, objs []obj) {
	t.Helper()
	role, binding := find(t, objs, "Role"), find(t, objs, "RoleBinding")
	if role == nil || binding == nil {
		t.Fatalf("Role %v, RoleBinding %v: want both for Events", role, binding)
	}
	want := []any{obj{"apiGroups": []any{""}, "resources": []any{"events"}, "verbs": []any{"create"}}}
	if got := role["rules"]; !reflect.DeepEqual(got, want) || get(role, "metadata", "namespace") != "nri-sysctl" {
		t.Errorf("Role %v, want rules %v in namespace nri-sysctl", role, want)
	}
	if get(binding, "roleRef", "kind") != "Role" || get(binding, "roleRef", "name") != get(role, "metadata", "name") ||
		!reflect.DeepEqual(get(binding, "subjects"), []any{obj{"kind": "ServiceAccount", "name": "nri-sysctl", "namespace": "nri-sysctl"}}) ||
		get(binding, "metadata", "namespace") != "nri-sysctl" {
		t.Errorf("RoleBinding %v", binding)
	}
}

// kernelCheck: false, explicitly, keeps spec mode unprivileged.
func TestTemplateSpecModeWithoutKernelCheck(t *testing.T) {
	d, _ := renderDaemonSet(t, "kernelCheck=false", "runningPods=keep")
	checkCommon(t, d)
	if caps := d.addedCaps(); len(caps) != 0 {
		t.Errorf("spec mode without the kernel check adds capabilities %v, want none", caps)
	}
	if got := d.sc("allowPrivilegeEscalation"); got != false {
		t.Errorf("allowPrivilegeEscalation = %v, want false", got)
	}
	if got := d.sc("appArmorProfile"); got != nil {
		t.Errorf("appArmorProfile %v, want the runtime's default", got)
	}
	if !d.hasArg("--skip-kernel-check") {
		t.Errorf("args %v lack --skip-kernel-check", d.args)
	}
}

func TestTemplateNamespaceMode(t *testing.T) {
	// Namespace mode checks whatever kernelCheck says: it has the
	// privileges anyway.
	d, _ := renderDaemonSet(t, "mode=namespace", "kernelCheck=false")
	checkCommon(t, d)
	checkKernelCheckPrivileges(t, d)
	if want := []string{"NET_ADMIN", "SETGID", "SETUID", "SYS_ADMIN", "SYS_PTRACE"}; !reflect.DeepEqual(d.addedCaps(), want) {
		t.Errorf("namespace mode adds %v, want exactly %v", d.addedCaps(), want)
	}
	if get(d.pod, "hostPID") != true {
		t.Error("namespace mode needs hostPID")
	}
	if !d.hasArg("--mode=namespace") || d.hasArg("--skip-kernel-check") {
		t.Errorf("args %v: want --mode=namespace and the kernel probe", d.args)
	}
	var netns obj
	for _, m := range get(d.ctr, "volumeMounts").([]any) {
		if m.(obj)["name"] == "netns" {
			netns = m.(obj)
		}
	}
	if netns["mountPath"] != "/var/run/netns" || netns["mountPropagation"] != "HostToContainer" {
		t.Errorf("netns mount %v, want /var/run/netns with HostToContainer propagation", netns)
	}
}

// A fleet of containerd 2.2 and 2.3+ nodes in one
// release. auto passes the choice to each node's plugin, with namespace
// mode's privileges on every node.
func TestTemplateAutoMode(t *testing.T) {
	d, _ := renderDaemonSet(t, "mode=auto")
	checkCommon(t, d)
	checkKernelCheckPrivileges(t, d)
	if want := []string{"NET_ADMIN", "SETGID", "SETUID", "SYS_ADMIN", "SYS_PTRACE"}; !reflect.DeepEqual(d.addedCaps(), want) {
		t.Errorf("auto mode adds %v, want namespace mode's %v", d.addedCaps(), want)
	}
	if get(d.pod, "hostPID") != true || !d.hasArg("--mode=auto") || d.hasArg("--skip-kernel-check") {
		t.Errorf("auto mode: hostPID %v, args %v; want hostPID, --mode=auto and the kernel check", get(d.pod, "hostPID"), d.args)
	}
}

// InheritFromHost reads the host's namespaces
// through /proc/1/ns, so in spec mode a config that uses it gets hostPID
// and CAP_SYS_PTRACE, and one that does not stays without.
func TestTemplateSpecModeInheritFromHost(t *testing.T) {
	plain, _ := renderDaemonSet(t, "runningPods=keep")
	if get(plain.pod, "hostPID") != nil || slices.Contains(plain.addedCaps(), "SYS_PTRACE") {
		t.Errorf("spec mode without inheritFromHost: hostPID %v, caps %v; want neither", get(plain.pod, "hostPID"), plain.addedCaps())
	}
	for _, sets := range [][]string{
		{"config=inheritFromHost: [net.ipv4.tcp_keepalive_*]", "runningPods=keep"},
		{"existingConfigMap=mine", "hostNamespaceAccess=true", "runningPods=keep"},
	} {
		d, _ := renderDaemonSet(t, sets...)
		if get(d.pod, "hostPID") != true || !slices.Contains(d.addedCaps(), "SYS_PTRACE") {
			t.Errorf("%v: hostPID %v, caps %v; want hostPID and SYS_PTRACE", sets, get(d.pod, "hostPID"), d.addedCaps())
		}
	}
}

func TestTemplateK3sSocketAndSharedDirectory(t *testing.T) {
	d, _ := renderDaemonSet(t, "containerd.socket=/run/k3s/containerd/containerd.sock")
	if got := d.hostDirs()["/run/k3s/containerd"]; got != [2]string{"/run/k3s/containerd", "Directory"} {
		t.Errorf("k3s: hostPaths %v", d.hostDirs())
	}
	if !d.hasArg("--containerd-address=/run/k3s/containerd/containerd.sock") {
		t.Errorf("k3s: args %v", d.args)
	}
	// Where no kube-proxy serves the kubernetes Service: extraEnv.
	d, _ = renderDaemonSet(t, "extraEnv[0].name=KUBERNETES_SERVICE_HOST", "extraEnv[0].value=10.0.0.1")
	env := asList(get(d.ctr, "env"))
	if !slices.ContainsFunc(env, func(e any) bool {
		return reflect.DeepEqual(e, obj{"name": "KUBERNETES_SERVICE_HOST", "value": "10.0.0.1"})
	}) || get(env, 0, "name") != "NODE_NAME" {
		t.Errorf("extraEnv: env %v", env)
	}
	// Both sockets in one directory: one volume, mounted once.
	d, _ = renderDaemonSet(t, "containerd.socket=/run/x/containerd.sock", "nri.socket=/run/x/nri.sock", "lastGoodConfigDir=", "runningPods=keep")
	if len(d.hostDirs()) != 1 {
		t.Errorf("one directory for both sockets: hostPaths %v", d.hostDirs())
	}
}

func TestTemplateWithoutTaintRemovalOrMetrics(t *testing.T) {
	d, objs := renderDaemonSet(t, "removeTaint=false", "metrics.enabled=false")
	if find(t, objs, "ClusterRole") != nil || find(t, objs, "ClusterRoleBinding") != nil {
		t.Error("the node ClusterRole rendered without removeTaint")
	}
	if d.hasArg("--remove-taint") {
		t.Errorf("--remove-taint without removeTaint: %v", d.args)
	}
	// Events still need the token.
	if get(d.pod, "automountServiceAccountToken") != true || !d.hasArg("--kubernetes-events") {
		t.Errorf("Events on without removeTaint: token %v, args %v", get(d.pod, "automountServiceAccountToken"), d.args)
	}
	checkEventsRole(t, objs)
	if get(d.ctr, "readinessProbe") != nil || get(d.ctr, "livenessProbe") != nil || strings.Contains(strings.Join(d.args, " "), "--metrics-address") {
		t.Error("readiness probe or metrics without metrics.enabled")
	}
}

// Neither the taint nor Events: no token, no RBAC, no pod identity.
func TestTemplateWithoutAPIAccess(t *testing.T) {
	d, objs := renderDaemonSet(t, "removeTaint=false", "events.enabled=false")
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		if find(t, objs, kind) != nil {
			t.Errorf("%s rendered without removeTaint or Events", kind)
		}
	}
	if get(d.pod, "automountServiceAccountToken") != false || d.hasArg("--kubernetes-events") {
		t.Errorf("token mounted or --kubernetes-events without Events: %v", d.args)
	}
	if refs := d.envFieldRefs(); len(refs) != 1 {
		t.Errorf("downward API env %v, want NODE_NAME alone", refs)
	}
}

func TestTemplateWithoutLastGoodConfig(t *testing.T) {
	d, _ := renderDaemonSet(t, "lastGoodConfigDir=")
	if _, ok := d.hostDirs()["/var/lib/nri-sysctl"]; ok || strings.Contains(strings.Join(d.args, " "), "--last-good-config") {
		t.Errorf("lastGoodConfigDir empty: hostPaths %v, args %v", d.hostDirs(), d.args)
	}
	d, _ = renderDaemonSet(t, "lastGoodConfigDir=/var/lib/other")
	if d.hostDirs()["/var/lib/other"] != [2]string{"/var/lib/other", "DirectoryOrCreate"} || !d.hasArg("--last-good-config=/var/lib/other/last-good-config.yaml") {
		t.Errorf("lastGoodConfigDir=/var/lib/other: hostPaths %v, args %v", d.hostDirs(), d.args)
	}
}

// renderNotes renders the chart's NOTES.txt, which helm template leaves
// out: in a copy of the chart, the notes' text becomes a ConfigMap's data,
// indented as a YAML block.
func renderNotes(t *testing.T, sets ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "nri-sysctl")
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	notes, err := os.ReadFile(filepath.Join(dir, "templates", "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	wrapped := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: |\n    " +
		strings.ReplaceAll(string(notes), "\n", "\n    ") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "templates", "notes-test.yaml"), []byte(wrapped), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"template", "nri-sysctl", dir, "--namespace", "nri-sysctl", "--kube-version", kubeVersion, "--show-only", "templates/notes-test.yaml"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := get(find(t, decodeAll(t, out), "ConfigMap"), "data", "notes").(string)
	if text == "" {
		t.Fatalf("no notes rendered:\n%s", out)
	}
	return text
}

// The install notes say what an operator loses with kernelCheck: false.
func TestNotesWithoutKernelCheck(t *testing.T) {
	if n := renderNotes(t); strings.Contains(n, "WARNING") || !strings.Contains(n, "checked against the node's kernel") {
		t.Errorf("default notes:\n%s", n)
	}
	n := renderNotes(t, "kernelCheck=false")
	for _, want := range []string{"WARNING: kernelCheck is false", "every pod created anywhere in the cluster fails to start", "nri-sysctl validate --config FILE"} {
		if !strings.Contains(n, want) {
			t.Errorf("kernelCheck=false notes lack %q:\n%s", want, n)
		}
	}
	// Namespace mode checks anyway: no warning.
	if n := renderNotes(t, "mode=namespace", "kernelCheck=false"); strings.Contains(n, "WARNING") {
		t.Errorf("namespace mode notes warn:\n%s", n)
	}
}

func TestTemplateRefusesBadValues(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"mode=bogus", "mode"},
		{"containerd.socket=containerd.sock", "socket"},
		{"nri.socket=/nri.sock", "socket"},
		{"watchConfigInterval=often", "watchConfigInterval"},
		{"unknownKey=1", "unknownKey"},
		{"lastGoodConfigDir=var/lib/nri-sysctl", "lastGoodConfigDir"},
		{"events.enabled=yes", "events"},
		{"nodePolicy.enabled=yes", "nodePolicy"},
		{"tolerateMissingPluginsAnnotation=not a key", "tolerateMissingPluginsAnnotation"},
		{"prometheusRule.alerts.down.for=5 minutes", "for"},
		{"prometheusRule.alerts.bogus.enabled=true", "bogus"},
		{"podMonitor.interval=often", "interval"},
		{"networkPolicy.scrapers.namespace=Not_A_Namespace", "namespace"},
		{"networkPolicy.scrapers.namespaceSelector.matchLabels.team=x", "namespaceSelector"},
		{"probes.readiness.timeoutSeconds=0", "timeoutSeconds"},
		{"probes.liveness.timeoutSeconds=soon", "timeoutSeconds"},
	} {
		out, err := renderText(t, tc.set)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: err %v, want one naming %q\n%s", tc.set, err, tc.want, out)
		}
	}
}

var update = flag.Bool("update", false, "rewrite config/kubernetes/nri-sysctl.yaml from the chart (make manifests)")

const plainManifests = "../../config/kubernetes/nri-sysctl.yaml"

// config/kubernetes/nri-sysctl.yaml is the chart's default rendering
// without Helm's own labels (make manifests).
func TestPlainManifestsMatchChart(t *testing.T) {
	out, err := renderText(t)
	if err != nil {
		t.Fatal(err)
	}
	want := plain(out)
	if *update {
		if err := os.WriteFile(plainManifests, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(plainManifests)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s differs from the chart's rendering: run `make manifests`", plainManifests)
	}
}

// plain drops what only Helm needs from helm template's output.
func plain(rendered string) string {
	var b strings.Builder
	b.WriteString("# Generated by `make manifests` from config/helm/nri-sysctl: helm template\n" +
		"# with the default values, namespace nri-sysctl. Edit the chart, not this file.\n" +
		"# The namespace is in namespace.yaml; kubectl apply -k config/kubernetes applies both.\n")
	for _, line := range strings.SplitAfter(rendered, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "# Source:") || strings.HasPrefix(trimmed, "helm.sh/chart:") || trimmed == "app.kubernetes.io/managed-by: Helm" {
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

// Where Pod Security's baseline level is enforced
// cluster-wide, the DaemonSet's pods are refused unless their namespace is
// labelled privileged; the shipped namespace is.
func TestNamespaceIsLabelledPrivileged(t *testing.T) {
	data, err := os.ReadFile("../../config/kubernetes/namespace.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ns struct {
		Kind     string
		Metadata struct {
			Labels map[string]string
		}
	}
	if err := yaml.Unmarshal(data, &ns); err != nil {
		t.Fatal(err)
	}
	if ns.Kind != "Namespace" || ns.Metadata.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Fatalf("namespace.yaml: kind %q, labels %v; want a Namespace with pod-security.kubernetes.io/enforce: privileged", ns.Kind, ns.Metadata.Labels)
	}
}

// Only the selected scrapers may reach the metrics
// port, by default; the policy selects the plugin's own pods, and is left
// out when metrics or the policy are off.
func TestTemplateNetworkPolicy(t *testing.T) {
	np := find(t, render(t), "NetworkPolicy")
	if np == nil {
		t.Fatal("no NetworkPolicy with the default values")
	}
	if got := get(np, "spec", "podSelector", "matchLabels", "app.kubernetes.io/name"); got != "nri-sysctl" {
		t.Errorf("the policy selects %v, want the plugin's pods", get(np, "spec", "podSelector"))
	}
	ingress, _ := get(np, "spec", "ingress").([]any)
	if len(ingress) != 1 {
		t.Fatalf("ingress %v, want one rule", ingress)
	}
	rule := ingress[0].(obj)
	froms := rule["from"].([]any)
	ports := rule["ports"].([]any)
	if len(froms) != 1 || get(froms[0], "podSelector", "matchLabels", "app.kubernetes.io/name") != "prometheus" || len(ports) != 1 || get(ports[0].(obj), "port") != 9183 {
		t.Errorf("ingress %v: want only pods labelled app.kubernetes.io/name=prometheus, on port 9183", rule)
	}
	// A pod label alone admits any pod whose author sets
	// it, in any namespace. The one namespace named, by the label the API
	// server sets to its name, in the same peer (AND, not a second peer).
	wantNS := obj{"matchLabels": obj{"kubernetes.io/metadata.name": "monitoring"}}
	if got := get(froms[0], "namespaceSelector"); !reflect.DeepEqual(got, wantNS) {
		t.Errorf("namespaceSelector %v, want %v: only the namespace named, not any", got, wantNS)
	}
	custom := find(t, render(t, "networkPolicy.scrapers.podSelector.matchLabels.app=vmagent", "networkPolicy.scrapers.namespace=observability", "metrics.port=9200"), "NetworkPolicy")
	if rule := get(custom, "spec", "ingress").([]any)[0].(obj); get(rule["from"].([]any)[0].(obj), "podSelector", "matchLabels", "app") != "vmagent" ||
		get(rule["from"].([]any)[0].(obj), "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name") != "observability" || get(rule["ports"].([]any)[0].(obj), "port") != 9200 {
		t.Errorf("custom scrapers: %v", rule)
	}
	// No namespace: refused at render, not "any namespace".
	if out, err := renderText(t, "networkPolicy.scrapers.namespace="); err == nil || !strings.Contains(err.Error(), "networkPolicy.scrapers.namespace") {
		t.Errorf("networkPolicy.scrapers.namespace empty: err %v, want one naming the value\n%s", err, out)
	}
	for _, sets := range [][]string{{"networkPolicy.enabled=false"}, {"metrics.enabled=false"}} {
		if np := find(t, render(t, sets...), "NetworkPolicy"); np != nil {
			t.Errorf("%v: a NetworkPolicy is rendered: %v", sets, np)
		}
	}
}

// The ClusterRole can only say "patch nodes", so a
// ValidatingAdmissionPolicy, on by default, narrows it to the plugin's own
// service account removing its taint from the node its token is bound to.
// What the API server makes of it is tested in TestK8sFleet.
func TestTemplateNodePolicy(t *testing.T) {
	objs := render(t)
	policy, binding := find(t, objs, "ValidatingAdmissionPolicy"), find(t, objs, "ValidatingAdmissionPolicyBinding")
	if policy == nil || binding == nil {
		t.Fatalf("policy %v, binding %v: want both with the default values", policy, binding)
	}
	if get(policy, "apiVersion") != "admissionregistration.k8s.io/v1" || get(binding, "apiVersion") != "admissionregistration.k8s.io/v1" {
		t.Errorf("apiVersions %v, %v: want admissionregistration.k8s.io/v1 (GA from Kubernetes 1.30)", get(policy, "apiVersion"), get(binding, "apiVersion"))
	}
	name := get(policy, "metadata", "name")
	if name != "nri-sysctl-node-taint" || get(binding, "spec", "policyName") != name ||
		!reflect.DeepEqual(get(binding, "spec", "validationActions"), []any{"Deny"}) || get(binding, "spec", "paramRef") != nil {
		t.Errorf("binding %v: want it to deny for policy %v", get(binding, "spec"), name)
	}
	if got := get(policy, "spec", "failurePolicy"); got != "Fail" {
		t.Errorf("failurePolicy %v, want Fail: a policy that cannot be evaluated must not hand back the whole ClusterRole", got)
	}
	wantRules := []any{obj{"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"UPDATE"}, "resources": []any{"nodes"}}}
	if got := get(policy, "spec", "matchConstraints", "resourceRules"); !reflect.DeepEqual(got, wantRules) {
		t.Errorf("resourceRules %v, want %v", got, wantRules)
	}
	conds := asList(get(policy, "spec", "matchConditions"))
	if len(conds) != 1 || get(conds[0], "expression") != `request.userInfo.username == "system:serviceaccount:nri-sysctl:nri-sysctl"` {
		t.Errorf("matchConditions %v: want the plugin's service account only (no one else's node updates evaluated)", conds)
	}
	var all strings.Builder
	for _, v := range asList(get(policy, "spec", "variables")) {
		all.WriteString(fmt.Sprint(get(v, "expression")) + "\n")
	}
	validations := asList(get(policy, "spec", "validations"))
	for _, v := range validations {
		all.WriteString(fmt.Sprint(get(v, "expression")) + "\n")
		if get(v, "reason") != "Forbidden" || (get(v, "message") == nil && get(v, "messageExpression") == nil) {
			t.Errorf("validation %v: want reason Forbidden and a message", v)
		}
	}
	for _, want := range []string{
		"request.userInfo.extra['authentication.kubernetes.io/node-name']", "object.metadata.name in variables.boundNode",
		`t.key == "nri-sysctl.io/not-ready" && t.effect == 'NoSchedule'`, "oldObject.spec.?taints",
	} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("the policy's expressions lack %q:\n%s", want, all.String())
		}
	}
	checkNodePolicyComparesWholeNode(t, policy)
	// Another service account name: the policy follows it.
	custom := find(t, render(t, "serviceAccount.name=sysctl-agent"), "ValidatingAdmissionPolicy")
	if got := get(asList(get(custom, "spec", "matchConditions"))[0], "expression"); got != `request.userInfo.username == "system:serviceaccount:nri-sysctl:sysctl-agent"` {
		t.Errorf("serviceAccount.name=sysctl-agent: matchCondition %v", got)
	}
	for _, sets := range [][]string{{"nodePolicy.enabled=false"}, {"removeTaint=false"}} {
		objs := render(t, sets...)
		if find(t, objs, "ValidatingAdmissionPolicy") != nil || find(t, objs, "ValidatingAdmissionPolicyBinding") != nil {
			t.Errorf("%v: the node policy is rendered", sets)
		}
	}
	// Turning the policy off leaves the ClusterRole as it was.
	if role := find(t, render(t, "nodePolicy.enabled=false"), "ClusterRole"); role == nil {
		t.Error("nodePolicy.enabled=false dropped the ClusterRole")
	}
}

// The node policy named spec and metadata fields one by
// one (a field a later Kubernetes adds was not covered) and ignored
// managedFields. It compares the whole node now: every key of spec but
// taints, of metadata but resourceVersion and managedFields, and every
// other top-level key, present before and after and equal; and
// managedFields, where only the plugin's own entry (manager nri-sysctl,
// Update) may change, owning only the taints, and the others may only lose
// the taints. What the API server makes of it: TestK8sFleet.
func checkNodePolicyComparesWholeNode(t *testing.T, policy obj) {
	t.Helper()
	vars := map[string]string{}
	for _, v := range asList(get(policy, "spec", "variables")) {
		vars[fmt.Sprint(get(v, "name"))] = fmt.Sprint(get(v, "expression"))
	}
	var rules []string
	for _, v := range asList(get(policy, "spec", "validations")) {
		rules = append(rules, fmt.Sprint(get(v, "expression")))
	}
	for name, want := range map[string]string{
		"spec": "dyn(object).?spec.orValue({})", "oldSpec": "dyn(oldObject).?spec.orValue({})",
		"meta": "dyn(object.metadata)", "oldMeta": "dyn(oldObject.metadata)",
		"managedFields": "dyn(object.metadata).?managedFields.orValue([])", "oldManagedFields": "dyn(oldObject.metadata).?managedFields.orValue([])",
		"taintsChanged": "variables.taintsAfter != variables.taintsBefore",
	} {
		if vars[name] != want {
			t.Errorf("variable %s = %q, want %q", name, vars[name], want)
		}
	}
	has := func(what string, parts ...string) {
		t.Helper()
		for _, r := range rules {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(r, p)
			}
			if ok {
				return
			}
		}
		t.Errorf("no validation %s: none has all of %q", what, parts)
	}
	has("compares every key of the spec but taints, both ways",
		"variables.spec.all(k, k == 'taints' || (k in variables.oldSpec && variables.spec[k] == variables.oldSpec[k]))",
		"variables.oldSpec.all(k, k == 'taints' || k in variables.spec)")
	has("compares every top-level key but spec and metadata, both ways",
		"dyn(object).all(k, k in ['spec', 'metadata'] || (k in dyn(oldObject) && dyn(object)[k] == dyn(oldObject)[k]))",
		"dyn(oldObject).all(k, k in ['spec', 'metadata'] || k in dyn(object))")
	has("compares every key of the metadata but resourceVersion and managedFields, both ways",
		"variables.meta.all(k, k in ['managedFields', 'resourceVersion'] || (k in variables.oldMeta && variables.meta[k] == variables.oldMeta[k]))",
		"variables.oldMeta.all(k, k in ['managedFields', 'resourceVersion'] || k in variables.meta)")
	plugin := `e.?manager.orValue('') == "nri-sysctl" && e.?operation.orValue('') == 'Update' && e.?subresource.orValue('') == ''`
	has("pins the plugin's own managedFields entry to the taints",
		"variables.managedFields.all(e, !(("+plugin+"))", "e.?fieldsV1.orValue({}) == {'f:spec': {'f:taints': {}}}")
	has("keeps every other managedFields entry, both ways",
		"variables.managedFields.all(e, ("+plugin+") || variables.oldManagedFields.exists(o, (e.all(k, k == 'fieldsV1' || (k in o && e[k] == o[k]))",
		"variables.oldManagedFields.all(o, (", "variables.managedFields.exists(e, (e.all(k, k == 'fieldsV1'",
		"(f == 'f:taints' && variables.taintsChanged)")
	// No field is named one by one any more.
	for _, r := range rules {
		for _, named := range []string{"unschedulable", "podCIDR", "providerID", "configSource", "?labels", "?annotations", "?finalizers", "?ownerReferences"} {
			if strings.Contains(r, named) {
				t.Errorf("a validation names %s (a field list misses what a later Kubernetes adds):\n%s", named, r)
			}
		}
	}
}

// The probes' timeouts are explicit (Kubernetes'
// default, 1 s, was exceeded under a connection flood) and set by values.
func TestTemplateProbeTimeouts(t *testing.T) {
	d, _ := renderDaemonSet(t)
	for probe, want := range map[string]int{"readinessProbe": 5, "livenessProbe": 5} {
		if got := get(d.ctr, probe, "timeoutSeconds"); got != want {
			t.Errorf("%s.timeoutSeconds = %v, want %d", probe, got, want)
		}
	}
	d, _ = renderDaemonSet(t, "probes.readiness.timeoutSeconds=3", "probes.liveness.timeoutSeconds=8")
	if r, l := get(d.ctr, "readinessProbe", "timeoutSeconds"), get(d.ctr, "livenessProbe", "timeoutSeconds"); r != 3 || l != 8 {
		t.Errorf("probes.*.timeoutSeconds 3 and 8: readiness %v, liveness %v", r, l)
	}
}

// Where containerd requires the plugin (the fail-closed
// drop-in), the plugin's own pod must start while no plugin is registered.
func TestTemplateTolerateMissingPluginsAnnotation(t *testing.T) {
	annotations := func(sets ...string) any {
		t.Helper()
		ds := find(t, render(t, sets...), "DaemonSet")
		return get(ds, "spec", "template", "metadata", "annotations")
	}
	if got := annotations(); !reflect.DeepEqual(got, obj{"tolerate-missing-plugins.nri.io": "true"}) {
		t.Errorf("default pod annotations %v, want tolerate-missing-plugins.nri.io: \"true\" (the key in config/containerd/30-nri-sysctl-required*.toml)", got)
	}
	if got := annotations("tolerateMissingPluginsAnnotation=example.com/tolerate", "podAnnotations.a=b"); !reflect.DeepEqual(got, obj{"example.com/tolerate": "true", "a": "b"}) {
		t.Errorf("custom key and podAnnotations: %v", got)
	}
	if got := annotations("tolerateMissingPluginsAnnotation="); got != nil {
		t.Errorf("tolerateMissingPluginsAnnotation empty: annotations %v, want none", got)
	}
	// The drop-ins name the chart's default key.
	for _, f := range []string{"30-nri-sysctl-required.toml", "30-nri-sysctl-required-v4.toml"} {
		data, err := os.ReadFile(filepath.Join("../../config/containerd", f))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), `tolerate_missing_plugins_annotation = "tolerate-missing-plugins.nri.io"`) || !strings.Contains(string(data), `required_plugins = ["sysctl"]`) {
			t.Errorf("%s does not require sysctl with the chart's annotation key:\n%s", f, data)
		}
	}
}

// Turning the node policy off is said at install.
func TestNotesWithoutNodePolicy(t *testing.T) {
	if n := renderNotes(t); strings.Contains(n, "nodePolicy") {
		t.Errorf("default notes mention nodePolicy:\n%s", n)
	}
	if n := renderNotes(t, "nodePolicy.enabled=false"); !strings.Contains(n, "WARNING: nodePolicy.enabled is false") || !strings.Contains(n, "every node") {
		t.Errorf("nodePolicy.enabled=false notes:\n%s", n)
	}
	if n := renderNotes(t, "nodePolicy.enabled=false", "removeTaint=false"); strings.Contains(n, "nodePolicy") {
		t.Errorf("no taint removal, no ClusterRole: the notes should not warn:\n%s", n)
	}
}

// RunningPods: converge (the default) writes into running pods'
// namespaces in spec mode too, so the chart grants namespace mode's
// privileges, the network namespaces' directory and a node directory for
// the pod state; keep drops them all.
func TestTemplateRunningPods(t *testing.T) {
	d, _ := renderDaemonSet(t)
	if want := []string{"NET_ADMIN", "SETGID", "SETUID", "SYS_ADMIN", "SYS_PTRACE"}; !reflect.DeepEqual(d.addedCaps(), want) {
		t.Errorf("spec mode, converge: adds %v, want namespace mode's %v", d.addedCaps(), want)
	}
	dirs := d.hostDirs()
	if get(d.pod, "hostPID") != true || !d.hasArg("--running-pods=converge") || !d.hasArg("--pod-state-dir=/run/nri-sysctl/pods") ||
		dirs["/run/nri-sysctl"] != [2]string{"/run/nri-sysctl", "DirectoryOrCreate"} || dirs["/var/run/netns"] == [2]string{} {
		t.Errorf("spec mode, converge: hostPID %v, args %v, hostPaths %v", get(d.pod, "hostPID"), d.args, dirs)
	}
	d, _ = renderDaemonSet(t, "runningPods=keep")
	dirs = d.hostDirs()
	if get(d.pod, "hostPID") == true || slices.Contains(d.addedCaps(), "SYS_PTRACE") || !d.hasArg("--running-pods=keep") || !d.hasArg("--pod-state-dir=") ||
		dirs["/run/nri-sysctl"] != [2]string{} || dirs["/var/run/netns"] != [2]string{} {
		t.Errorf("spec mode, keep: hostPID %v, caps %v, args %v, hostPaths %v", get(d.pod, "hostPID"), d.addedCaps(), d.args, dirs)
	}
	if _, err := renderText(t, "runningPods=always"); err == nil {
		t.Error("runningPods=always rendered")
	}
}

// ConfigRollout: staged makes a ConfigMap per config
// (the hash in its name, immutable) and no live reload, so an edit is a
// new DaemonSet template, rolled node by node with minReadySeconds
// between; live keeps one watched ConfigMap.
func TestTemplateStagedConfigRollout(t *testing.T) {
	volumeOf := func(objs []obj) string {
		ds := find(t, objs, "DaemonSet")
		for _, v := range get(ds, "spec", "template", "spec", "volumes").([]any) {
			if get(v, "name") == "config" {
				return get(v, "configMap", "name").(string)
			}
		}
		t.Fatal("no config volume")
		return ""
	}
	live, objs := renderDaemonSet(t)
	if name := volumeOf(objs); name != "nri-sysctl" || !slices.ContainsFunc(live.args, func(a string) bool { return strings.HasPrefix(a, "--watch-config=") }) {
		t.Errorf("live: ConfigMap %q, args %v; want nri-sysctl, watched", name, live.args)
	}
	staged, objs := renderDaemonSet(t, "configRollout=staged", "minReadySeconds=30")
	first := volumeOf(objs)
	cm := find(t, objs, "ConfigMap")
	if !strings.HasPrefix(first, "nri-sysctl-") || len(first) != len("nri-sysctl-")+10 || get(cm, "metadata", "name") != first || get(cm, "immutable") != true {
		t.Errorf("staged: volume %q, ConfigMap %v; want nri-sysctl-<10 hex>, the same, immutable", first, get(cm, "metadata"))
	}
	if slices.ContainsFunc(staged.args, func(a string) bool { return strings.HasPrefix(a, "--watch-config=") }) {
		t.Errorf("staged: args %v watch the config", staged.args)
	}
	if got := get(find(t, objs, "DaemonSet"), "spec", "minReadySeconds"); got != float64(30) && got != 30 {
		t.Errorf("minReadySeconds %v, want 30", got)
	}
	_, objs = renderDaemonSet(t, "configRollout=staged", "config=sysctls: {net.ipv4.tcp_keepalive_time: 650}")
	if second := volumeOf(objs); second == first {
		t.Errorf("staged: an edited config kept the ConfigMap name %s", first)
	}
	if _, err := renderText(t, "configRollout=staged", "existingConfigMap=mine"); err == nil {
		t.Error("staged with existingConfigMap rendered")
	}
	if _, err := renderText(t, "configRollout=canary"); err == nil {
		t.Error("configRollout=canary rendered")
	}
}
