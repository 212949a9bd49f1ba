// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

// The fleet's node policy and rolling updates, on the e2e-k8s cluster:
//   - the plugin's own service-account token, bound to its pod (so to its
//     node), may remove the not-ready taint from its node and do nothing
//     else: the chart's ValidatingAdmissionPolicy makes the API server
//     refuse the rest (checkPluginTokenRefusals);
//   - what a rolling update of the plugin (an image-tag helm upgrade) does
//     to pods started meanwhile, with and without containerd's fail-closed
//     drop-in (measureRollingUpdate).
// Both take what they need as arguments, so that a cluster of more nodes
// can run them per node.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/test/internal/containerdversion"
)

// The annotation key the fail-closed drop-in tells containerd to honour,
// and the chart puts on the plugin's pod.
const tolerateMissingPluginsAnnotation = "tolerate-missing-plugins.nri.io"

// tokenClient sends API requests with a bearer token (no client
// certificate), as a pod does, and the plugin's User-Agent: the API server
// records a patch without ?fieldManager under the User-Agent's part before
// the "/" (nri-sysctl), the managedFields entry the chart's node policy
// lets the plugin write.
type tokenClient struct {
	server, token string
	http          *http.Client
}

// pluginUserAgent is what pkg/kubeapi sends, nri-sysctl/<version>.
const pluginUserAgent = "nri-sysctl/e2e"

type userAgentTransport struct {
	agent string
	next  http.RoundTripper
}

func (u userAgentTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("User-Agent", u.agent)
	return u.next.RoundTrip(req)
}

func (k *k8sCluster) tokenClient(t *testing.T, token string) tokenClient {
	t.Helper()
	client, err := apiClient(k.pki.caFile, "", "")
	if err != nil {
		t.Fatal(err)
	}
	client.Transport = userAgentTransport{agent: pluginUserAgent, next: client.Transport}
	return tokenClient{server: k.server, token: token, http: client}
}

func (c tokenClient) do(method, path, contentType string, body any) ([]byte, int, error) {
	return apiRequest(c.http, c.server, c.token, method, path, contentType, body)
}

// serviceAccountToken makes a token for the plugin's service account
// (TokenRequest); bound to the pod, it is the token the pod is given
// (a projected token carries the pod's node).
func (k *k8sCluster) serviceAccountToken(t *testing.T, ns, sa string, boundTo *k8sPod) string {
	t.Helper()
	spec := map[string]any{"expirationSeconds": 600}
	if boundTo != nil {
		spec["boundObjectRef"] = map[string]string{"apiVersion": "v1", "kind": "Pod", "name": boundTo.Metadata.Name, "uid": boundTo.Metadata.UID}
	}
	var tr struct {
		Status struct{ Token string } `json:"status"`
	}
	k.mustDo(t, http.MethodPost, "/api/v1/namespaces/"+ns+"/serviceaccounts/"+sa+"/token", "",
		map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}, &tr)
	if tr.Status.Token == "" {
		t.Fatal("TokenRequest: no token")
	}
	return tr.Status.Token
}

// whoAmI is the API server's view of a token (SelfSubjectReview): the
// user name and the node-name extra the policy compares.
func (c tokenClient) whoAmI(t *testing.T) (user string, extra map[string][]string) {
	t.Helper()
	data, code, err := c.do(http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews", "",
		map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
	if err != nil || code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("SelfSubjectReview: HTTP %d %v %s", code, err, data)
	}
	var r struct {
		Status struct {
			UserInfo struct {
				Username string              `json:"username"`
				Extra    map[string][]string `json:"extra"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r.Status.UserInfo.Username, r.Status.UserInfo.Extra
}

// nodeObject is the part of a node the token checks compare.
type nodeObject struct {
	Metadata struct {
		Name          string            `json:"name"`
		Labels        map[string]string `json:"labels"`
		Annotations   map[string]string `json:"annotations"`
		Finalizers    []string          `json:"finalizers"`
		ManagedFields []struct {
			Manager     string `json:"manager"`
			Operation   string `json:"operation"`
			Subresource string `json:"subresource"`
		} `json:"managedFields"`
	} `json:"metadata"`
	Spec struct {
		Unschedulable bool              `json:"unschedulable"`
		ProviderID    string            `json:"providerID"`
		Taints        []json.RawMessage `json:"taints"`
	} `json:"spec"`
}

// managers lists the node's managedFields entries (manager, operation,
// subresource; not their times, which the kubelet's status updates move).
func (n nodeObject) managers() []string {
	var m []string
	for _, e := range n.Metadata.ManagedFields {
		m = append(m, e.Manager+"/"+e.Operation+"/"+e.Subresource)
	}
	sort.Strings(m)
	return m
}

func (k *k8sCluster) nodeObject(t *testing.T, name string) nodeObject {
	t.Helper()
	var n nodeObject
	k.mustDo(t, http.MethodGet, "/api/v1/nodes/"+name, "", nil, &n)
	return n
}

// summary is what a refused patch must leave as it was: labels,
// annotations, unschedulable, and the taints other than the node
// lifecycle controller's (node.kubernetes.io/*, which it may add to a
// node without a kubelet meanwhile).
func (n nodeObject) summary() string {
	var taints []string
	for _, raw := range n.Spec.Taints {
		var tt struct{ Key string }
		if json.Unmarshal(raw, &tt) == nil && !strings.HasPrefix(tt.Key, "node.kubernetes.io/") {
			taints = append(taints, string(raw))
		}
	}
	return fmt.Sprintf("labels %v annotations %v finalizers %v unschedulable %v providerID %q taints %v", n.Metadata.Labels, n.Metadata.Annotations, n.Metadata.Finalizers, n.Spec.Unschedulable, n.Spec.ProviderID, taints)
}

func (n nodeObject) taintIndex(key, effect string) int {
	for i, raw := range n.Spec.Taints {
		var tt struct{ Key, Effect string }
		if json.Unmarshal(raw, &tt) == nil && tt.Key == key && tt.Effect == effect {
			return i
		}
	}
	return -1
}

// removeTaintPatch is the JSON patch the plugin sends (pkg/kubeapi): test
// that the entry is the taint, and remove it.
func removeTaintPatch(n nodeObject, index int) []map[string]any {
	at := fmt.Sprintf("/spec/taints/%d", index)
	return []map[string]any{{"op": "test", "path": at, "value": n.Spec.Taints[index]}, {"op": "remove", "path": at}}
}

// addTaintPatch is a JSON patch that adds a taint (the list itself when
// the node has none).
func addTaintPatch(n nodeObject, key, effect string) []map[string]any {
	taint := map[string]string{"key": key, "effect": effect}
	if len(n.Spec.Taints) == 0 {
		return []map[string]any{{"op": "add", "path": "/spec/taints", "value": []any{taint}}}
	}
	return []map[string]any{{"op": "add", "path": "/spec/taints/-", "value": taint}}
}

// createFakeNode registers a Node object with no kubelet behind it, with
// the not-ready taint, and deletes it when the test ends.
func (k *k8sCluster) createFakeNode(t *testing.T, name string) {
	t.Helper()
	k.mustDo(t, http.MethodPost, "/api/v1/nodes", "", map[string]any{
		"apiVersion": "v1", "kind": "Node",
		// No kubernetes.io/os label: the plugin's DaemonSet (which
		// tolerates every taint) must not put a pod there.
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"taints": []any{map[string]string{"key": "nri-sysctl.io/not-ready", "effect": "NoSchedule"}}},
	}, nil)
	t.Cleanup(func() {
		if _, code, err := k.do(http.MethodDelete, "/api/v1/nodes/"+name, "", nil); err != nil || (code != http.StatusOK && code != http.StatusNotFound) {
			t.Errorf("delete node %s: HTTP %d %v", name, code, err)
		}
	})
}

// checkPluginTokenRefusals: the token of the plugin pod on ownNode (bound
// to that pod, as the kubelet's projected token is) may remove the
// not-ready taint from ownNode and nothing else. otherNode is another node
// (a real one, or createFakeNode's); it gets the taint for the try if it
// has lost it. Each refusal must come
// from the chart's policy (RBAC allows all of them), and leave the node as
// it was.
func checkPluginTokenRefusals(t *testing.T, k *k8sCluster, pluginPod k8sPod, ownNode, otherNode string) {
	t.Helper()
	plugin := k.tokenClient(t, k.serviceAccountToken(t, pluginNamespace, pluginRelease, &pluginPod))
	user, extra := plugin.whoAmI(t)
	if want := "system:serviceaccount:" + pluginNamespace + ":" + pluginRelease; user != want {
		t.Fatalf("the token is %q's, want %q's", user, want)
	}
	if got := extra["authentication.kubernetes.io/node-name"]; len(got) != 1 || got[0] != ownNode {
		t.Fatalf("the pod-bound token's node-name extra is %v, want [%s] (extra: %v)", got, ownNode, extra)
	}
	logf("the plugin's pod-bound token: user %s, node-name %v", user, extra["authentication.kubernetes.io/node-name"])

	const jsonPatch, mergePatch = "application/json-patch+json", "application/merge-patch+json"
	// refused: the patch, sent to the node's path, is refused.
	refused := func(what, node, contentType string, patch any) {
		t.Helper()
		before := k.nodeObject(t, node)
		data, code, err := plugin.do(http.MethodPatch, "/api/v1/nodes/"+node, contentType, patch)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if code != http.StatusForbidden || !strings.Contains(string(data), "ValidatingAdmissionPolicy") {
			t.Errorf("%s: HTTP %d %s; want 403 from the chart's ValidatingAdmissionPolicy", what, code, data)
		} else {
			var st struct{ Message string }
			_ = json.Unmarshal(data, &st)
			logf("%s: refused: %s", what, st.Message)
		}
		if b, a := before.summary(), k.nodeObject(t, node).summary(); b != a {
			t.Errorf("%s: node %s changed: %s -> %s", what, node, b, a)
		}
	}
	// (a) another node: the very patch the plugin sends for its own, and a label.
	// A real other node has lost its taint to its own plugin: the admin
	// puts it back for the try, and takes it away after.
	other := k.nodeObject(t, otherNode)
	i := other.taintIndex("nri-sysctl.io/not-ready", "NoSchedule")
	if i < 0 {
		k.mustDo(t, http.MethodPatch, "/api/v1/nodes/"+otherNode, jsonPatch, addTaintPatch(other, "nri-sysctl.io/not-ready", "NoSchedule"), nil)
		t.Cleanup(func() {
			if n := k.nodeObject(t, otherNode); n.taintIndex("nri-sysctl.io/not-ready", "NoSchedule") >= 0 {
				k.mustDo(t, http.MethodPatch, "/api/v1/nodes/"+otherNode, jsonPatch, removeTaintPatch(n, n.taintIndex("nri-sysctl.io/not-ready", "NoSchedule")), nil)
			}
		})
		other = k.nodeObject(t, otherNode)
		i = other.taintIndex("nri-sysctl.io/not-ready", "NoSchedule")
	}
	refused("removing the not-ready taint of another node", otherNode, jsonPatch, removeTaintPatch(other, i))
	refused("labelling another node", otherNode, mergePatch, map[string]any{"metadata": map[string]any{"labels": map[string]string{"e2e-stolen": "yes"}}})

	// (b) its own node, anything but that taint.
	refused("labelling its own node", ownNode, mergePatch, map[string]any{"metadata": map[string]any{"labels": map[string]string{"e2e-stolen": "yes"}}})
	refused("annotating its own node", ownNode, mergePatch, map[string]any{"metadata": map[string]any{"annotations": map[string]string{"e2e-stolen": "yes"}}})
	refused("adding a taint to its own node", ownNode, jsonPatch, addTaintPatch(k.nodeObject(t, ownNode), "e2e-stolen", "NoExecute"))
	refused("cordoning its own node", ownNode, mergePatch, map[string]any{"spec": map[string]any{"unschedulable": true}})
	// The policy compares the whole node, not a list of
	// fields; each of these passed the field-by-field policy, or its
	// metadata part, before.
	refused("setting its own node's providerID", ownNode, mergePatch, map[string]any{"spec": map[string]any{"providerID": "e2e://stolen"}})
	const stolenFinalizer = "e2e.nri-sysctl.io/stolen"
	t.Cleanup(func() {
		// Only if the policy let it through: the node could not be deleted.
		if n := k.nodeObject(t, ownNode); slices.Contains(n.Metadata.Finalizers, stolenFinalizer) {
			k.mustDo(t, http.MethodPatch, "/api/v1/nodes/"+ownNode, mergePatch, map[string]any{"metadata": map[string]any{"finalizers": nil}}, nil)
		}
	})
	refused("adding a finalizer to its own node", ownNode, mergePatch, map[string]any{"metadata": map[string]any{"finalizers": []string{stolenFinalizer}}})
	// A list with one empty entry is how a client strips managedFields.
	managersBefore := k.nodeObject(t, ownNode).managers()
	refused("wiping its own node's managedFields", ownNode, mergePatch, map[string]any{"metadata": map[string]any{"managedFields": []any{map[string]any{}}}})
	if after := k.nodeObject(t, ownNode).managers(); !equalJSON(after, managersBefore) {
		t.Errorf("after the refused managedFields wipe: managers %v, before %v", after, managersBefore)
	}

	// (c) its own node's not-ready taint, put back by the admin: removed.
	k.mustDo(t, http.MethodPatch, "/api/v1/nodes/"+ownNode, jsonPatch, addTaintPatch(k.nodeObject(t, ownNode), "nri-sysctl.io/not-ready", "NoSchedule"), nil)
	own := k.nodeObject(t, ownNode)
	if i = own.taintIndex("nri-sysctl.io/not-ready", "NoSchedule"); i < 0 {
		t.Fatalf("the admin's taint is not on %s: %s", ownNode, own.Spec.Taints)
	}
	// Not checked: the removal recorded under another field manager
	// (?fieldManager=kubelet) passes the policy, the node then being what
	// the plugin's own removal makes it (seen here; chart README).
	// A token not bound to a pod carries no node: refused even this.
	unbound := k.tokenClient(t, k.serviceAccountToken(t, pluginNamespace, pluginRelease, nil))
	if data, code, err := unbound.do(http.MethodPatch, "/api/v1/nodes/"+ownNode, jsonPatch, removeTaintPatch(own, i)); err != nil || code != http.StatusForbidden || !strings.Contains(string(data), "ValidatingAdmissionPolicy") {
		t.Errorf("a token bound to no pod removing the not-ready taint: HTTP %d %v %s; want 403 from the policy", code, err, data)
	}
	data, code, err := plugin.do(http.MethodPatch, "/api/v1/nodes/"+ownNode, jsonPatch, removeTaintPatch(own, i))
	if err != nil || code != http.StatusOK {
		t.Fatalf("removing the not-ready taint of its own node: HTTP %d %v %s; want 200", code, err, data)
	}
	if after := k.nodeObject(t, ownNode); after.taintIndex("nri-sysctl.io/not-ready", "NoSchedule") >= 0 || len(after.Spec.Taints) != len(own.Spec.Taints)-1 {
		t.Errorf("after the plugin token's removal: taints %s (before %s); want only the not-ready taint gone", after.Spec.Taints, own.Spec.Taints)
	}
}

// checkPluginRemovesTaintUnderPolicy: the plugin's own patch passes the
// policy. The admin puts the not-ready taint back on the node and deletes
// the plugin's pod there; its replacement, started while the policy is in
// force (the refusals above show it is), must remove the taint itself.
func checkPluginRemovesTaintUnderPolicy(t *testing.T, k *k8sCluster, pluginPod k8sPod, node string) {
	t.Helper()
	k.mustDo(t, http.MethodPatch, "/api/v1/nodes/"+node, "application/json-patch+json", addTaintPatch(k.nodeObject(t, node), "nri-sysctl.io/not-ready", "NoSchedule"), nil)
	start := time.Now()
	if data, code, err := k.do(http.MethodDelete, "/api/v1/namespaces/"+pluginNamespace+"/pods/"+pluginPod.Metadata.Name, "", nil); err != nil || code != http.StatusOK {
		t.Fatalf("delete plugin pod %s: HTTP %d %v %s", pluginPod.Metadata.Name, code, err, data)
	}
	waitUntil(t, 2*time.Minute, "the new plugin pod to remove the not-ready taint of "+node, func() (bool, string) {
		n := k.nodeObject(t, node)
		return n.taintIndex("nri-sysctl.io/not-ready", "NoSchedule") < 0, fmt.Sprint(n.Spec.Taints)
	})
	logf("plugin pod %s deleted with the taint back on %s: its replacement removed the taint through the policy %s later", pluginPod.Metadata.Name, node, time.Since(start).Round(100*time.Millisecond))
}

func equalJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// configVersion is the version of the config the harness gives c's
// containerd 2.x (3, or 4 from 2.3): a drop-in must carry the same.
func configVersion(c *cluster) int {
	if strings.Contains(containerdConfig(c), "\nversion = 4\n") {
		return 4
	}
	return 3
}

// failClosedDropIn is the shipped drop-in for this containerd's config
// version.
func failClosedDropIn(c *cluster) string {
	name := "30-nri-sysctl-required.toml"
	if configVersion(c) == 4 {
		name = "30-nri-sysctl-required-v4.toml"
	}
	return filepath.Join(c.repoRoot, "config", "containerd", name)
}

// restartContainerdImporting restarts containerd, its pods left running
// (as on a node), with its base config importing the drop-ins, and waits
// for the plugin's pod to register again.
func (k *k8sCluster) restartContainerdImporting(t *testing.T, dropIns ...string) {
	t.Helper()
	c := k.c
	plugin := k.pluginContainer(t)
	registered := strings.Count(k.pluginLogsAll(t, plugin), "registered with NRI")
	cfg := containerdConfig(c)
	if len(dropIns) > 0 {
		quoted, _ := json.Marshal(dropIns)
		// imports belong at the top, before any table.
		cfg = strings.Replace(cfg, "\nroot = ", "\nimports = "+string(quoted)+"\nroot = ", 1)
	}
	if err := os.WriteFile(c.configPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	stopProcess(c.cmd.Process.Pid, c.exited, 15*time.Second)
	if err := c.startContainerd(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "the plugin to register again after containerd restarted", func() (bool, string) {
		return strings.Count(k.pluginLogsAll(t, plugin), "registered with NRI") > registered, ""
	})
	logf("containerd restarted importing %v", dropIns)
}

// rollCounts is what a rolling update did to the pods created during it.
type rollCounts struct {
	created, withDefaults, withoutDefaults, neverStarted, refusedThenStarted int
	upgrade                                                                  time.Duration // from helm upgrade's start to the new plugin pod's readiness
	without                                                                  []string      // pods that run without their defaults, and what they see
}

func (r rollCounts) String() string {
	return fmt.Sprintf("%d pods created during the update: %d with the defaults (%d of them refused by containerd first, then started), %d without, %d never started; the new plugin pod ready %s after helm upgrade started",
		r.created, r.withDefaults, r.refusedThenStarted, r.withoutDefaults, r.neverStarted, r.upgrade.Round(100*time.Millisecond))
}

// measureRollingUpdate runs `helm upgrade` with another image tag while
// pods are created every interval, keeps creating them until the new
// plugin pod is ready and a little after, then reads each pod's values
// inside its container.
func (k *k8sCluster) measureRollingUpdate(t *testing.T, h helmRun, chart, valuesFile, tag, prefix string) rollCounts {
	t.Helper()
	const interval = 600 * time.Millisecond
	old := k.readyPluginPod(t, "", time.Minute)
	var (
		mu      sync.Mutex
		names   []string
		errs    []string
		stop    = make(chan struct{})
		stopped = make(chan struct{})
	)
	go func() {
		defer close(stopped)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(interval):
			}
			name := fmt.Sprintf("%s-%03d", prefix, i)
			data, code, err := k.do(http.MethodPost, "/api/v1/namespaces/"+k8sTestNamespace+"/pods", "", rollPod(name))
			mu.Lock()
			if err != nil || code != http.StatusCreated {
				errs = append(errs, fmt.Sprintf("%s: HTTP %d %v %s", name, code, err, data))
			} else {
				names = append(names, name)
			}
			mu.Unlock()
		}
	}()
	upgradeStart := time.Now()
	h.run(t, "upgrade", pluginRelease, chart, "-n", pluginNamespace, "-f", valuesFile, "--set", "image.tag="+tag, "--wait", "--timeout", "3m")
	k.waitDaemonSet(t)
	newPod := k.readyPluginPod(t, old.Metadata.UID, 2*time.Minute)
	took := time.Since(upgradeStart)
	time.Sleep(3 * time.Second)
	close(stop)
	<-stopped
	if len(errs) > 0 {
		t.Fatalf("creating pods: %s", strings.Join(errs, "; "))
	}
	logf("rolling update to tag %s: plugin pod %s -> %s, ready %s after helm upgrade started; %d pods created", tag, old.Metadata.Name, newPod.Metadata.Name, took.Round(100*time.Millisecond), len(names))

	r := rollCounts{created: len(names), upgrade: took}
	keys := sortedKeys(k8sDefaults)
	for _, name := range names {
		if !k.podReadyWithin(t, name, 2*time.Minute) {
			r.neverStarted++
			logf("pod %s did not start within 2 minutes", name)
			continue
		}
		refused := k.podRefusals(t, name)[refusedNoPlugin]
		id := k.c.containerOf(t, k8sTestNamespace, name, "app")
		vals, err := k.c.readSysctlsErr(id, keys...)
		switch {
		case err != nil:
			t.Errorf("pod %s: reading its values: %v", name, err)
		case equalJSON(vals, k8sDefaults):
			r.withDefaults++
			if refused {
				r.refusedThenStarted++
			}
		default:
			r.withoutDefaults++
			r.without = append(r.without, fmt.Sprintf("%s %v", name, vals))
			if r.withoutDefaults <= 3 { // enough to tell why; fail-open has many
				logf("pod %s lacks its defaults. Why, as far as the node can tell:\n%s", name, k.c.whyLacking(t, id))
			}
		}
	}
	for _, name := range names {
		k.deletePod(t, k8sTestNamespace, name)
	}
	sort.Strings(r.without)
	return r
}

// rollPod is a plain pod of the test's namespace.
func rollPod(name string) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": name, "namespace": k8sTestNamespace},
		"spec": map[string]any{
			"terminationGracePeriodSeconds": 0, "automountServiceAccountToken": false, "enableServiceLinks": false,
			"containers": []any{map[string]any{"name": "app", "image": busyboxImage, "imagePullPolicy": "Never", "command": []string{"sleep", "3600"}}},
		}}
}

// Why containerd refused to create one of a pod's containers, as the
// kubelet reported it in the pod's Events.
const (
	// refusedNoPlugin: a required NRI plugin was absent (fail-closed).
	refusedNoPlugin = "required plugin"
	// refusedLeaving: nri-sysctl refused it while it was stopping.
	refusedLeaving = "nri-sysctl is stopping"
)

// podRefusals tells which of the refusals above the pod's Events name.
func (k *k8sCluster) podRefusals(t *testing.T, name string) map[string]bool {
	t.Helper()
	q := url.Values{"fieldSelector": {"involvedObject.name=" + name}}
	var events struct{ Items []k8sEvent }
	k.mustDo(t, http.MethodGet, "/api/v1/namespaces/"+k8sTestNamespace+"/events?"+q.Encode(), "", nil, &events)
	found := map[string]bool{}
	for _, e := range events.Items {
		for _, why := range []string{refusedNoPlugin, refusedLeaving} {
			if strings.Contains(e.Message, why) {
				found[why] = true
			}
		}
	}
	return found
}

// podReadyWithin waits for the pod's Ready condition; false if it does not
// come.
func (k *k8sCluster) podReadyWithin(t *testing.T, name string, timeout time.Duration) bool {
	t.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		p, _ := k.pod(t, k8sTestNamespace, name)
		for _, c := range p.Status.Conditions {
			if c.Type == "Ready" && c.Status == "True" {
				return true
			}
		}
	}
	return false
}

// testRollingUpdateFailClosed measures two image-tag upgrades of the
// plugin, first with containerd's base config, then with the shipped
// fail-closed drop-in imported, and asserts the fail-closed property:
// every pod created during the second one that runs has its defaults.
// containerd is restarted with its base config afterwards.
func testRollingUpdateFailClosed(t *testing.T, k *k8sCluster, h helmRun, chart, valuesFile, image string) {
	c := k.c
	if major, minor := containerdversion.Parse(c.version); major < 2 || (major == 2 && minor < 2) {
		t.Skipf("containerd %s has no NRI default validator (required_plugins needs containerd >= 2.2): fail-closed cannot be configured there", c.version)
	}
	// Two more tags of the same image: each upgrade changes the tag, as a
	// release does.
	for _, suffix := range []string{"-roll-open", "-roll-closed"} {
		if out, err := c.ctr("images", "tag", "--force", image, image+suffix); err != nil {
			t.Fatalf("ctr images tag: %v %s", err, out)
		}
	}
	_, tag, _ := strings.Cut(image, ":")

	start := time.Now()
	open := k.measureRollingUpdate(t, h, chart, valuesFile, tag+"-roll-open", "roll-open")
	logf("rolling update without the fail-closed drop-in: %s (%s)", open, time.Since(start).Round(time.Second))
	for _, w := range open.without {
		logf("  without its defaults: %s", w)
	}

	dropIn := failClosedDropIn(c)
	k.restartContainerdImporting(t, dropIn)
	t.Cleanup(func() { k.restartContainerdImporting(t) })
	if out, err := containerdCommand(c, "config", "dump"); err != nil || !strings.Contains(out, "required_plugins = ['sysctl']") ||
		!strings.Contains(out, "tolerate_missing_plugins_annotation = '"+tolerateMissingPluginsAnnotation+"'") || !strings.Contains(out, c.nriSock) {
		t.Fatalf("containerd's config dump with %s lacks required_plugins, the annotation or the NRI socket (%v):\n%s", dropIn, err, out)
	}
	start = time.Now()
	closed := k.measureRollingUpdate(t, h, chart, valuesFile, tag+"-roll-closed", "roll-closed")
	logf("rolling update with the fail-closed drop-in %s: %s (%s)", filepath.Base(dropIn), closed, time.Since(start).Round(time.Second))
	if closed.withoutDefaults != 0 {
		t.Errorf("fail-closed: %d pods run without their defaults: %v", closed.withoutDefaults, closed.without)
	}
	if closed.created == 0 || closed.withDefaults+closed.neverStarted != closed.created {
		t.Errorf("fail-closed: %s", closed)
	}
	// Pods were created while no plugin was registered, and containerd
	// refused them then: otherwise this run did not hit the window.
	if closed.refusedThenStarted == 0 {
		t.Errorf("fail-closed: no pod was refused while the plugin was away, so the update's window was not measured: %s", closed)
	}
}
