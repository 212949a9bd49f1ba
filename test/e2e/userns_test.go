// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"os"
	"strings"
	"testing"
)

// TestUserNamespacePod: in a pod with its own user namespace,
// net.ipv4.ping_group_range is clamped to the pod's gid mapping (0-65535
// here), as CRI-O does. Debian 12's runc 1.1.5 lacks the id-mapped mounts
// containerd 2.x needs for such pods, so they run under a newer runc that
// test/setup.sh builds, through its own runtime handler.
//
// net.core.xfrm_acq_expires is hidden inside a network namespace owned by a
// user namespace: the plugin leaves it out for such a pod (which would
// otherwise fail to start) and gives it to an ordinary pod.
func TestUserNamespacePod(t *testing.T) {
	c := getCluster(t)
	hostLock.hold(t, false) // compares the host's values (hostlock_test.go)
	const key = "net.ipv4.ping_group_range"
	const xfrmAcqExpires = "31"
	if hostSysctl(t, "net.core.xfrm_acq_expires") == xfrmAcqExpires {
		t.Fatalf("test value net.core.xfrm_acq_expires=%s equals the host's; pick another", xfrmAcqExpires)
	}
	startPlugin(t, "sysctls:\n  "+key+": \"0 2147483647\"\n  net.ipv4.tcp_keepalive_time: \"600\"\n  net.core.xfrm_acq_expires: \""+xfrmAcqExpires+"\"\n")
	if _, err := os.Stat(usernsRunc(c)); err != nil {
		t.Fatalf("runc %s for user-namespace pods is missing: run test/setup.sh: %v", usernsRuncVersion, err)
	}
	id := runUserNamespacePod(t, "userns", "e2e-userns")
	if got := strings.Join(strings.Fields(readSysctl(t, id, key)), " "); got != "0 65535" {
		t.Errorf("%s = %q, want the clamped \"0 65535\"", key, got)
	}
	if got := readSysctl(t, id, "net.ipv4.tcp_keepalive_time"); got != "600" {
		t.Errorf("tcp_keepalive_time = %s, want 600", got)
	}
	// The key does not even exist in a network namespace that a user
	// namespace owns; had the plugin set it, the container would not start.
	if got := strings.TrimSpace(execIn(t, id, "sh", "-c", "cat /proc/sys/net/core/xfrm_acq_expires 2>/dev/null || echo absent")); got != "absent" {
		t.Errorf("net.core.xfrm_acq_expires = %s in the user-namespace pod; expected the kernel to hide it", got)
	}
	if ann := containerAnnotations(t, id)[annotationSkipped]; !strings.Contains(ann, "net.core.xfrm_acq_expires (cannot be set in the pod's user namespace: the kernel refuses it when") {
		t.Errorf("annotation %s = %q, want xfrm_acq_expires skipped for the user namespace", annotationSkipped, ann)
	}

	ordinary := runPod(t, PodSpec{Name: "no-userns", Namespace: "e2e-userns"})
	oid := runContainer(t, ordinary, "app")
	if got := readSysctl(t, oid, "net.core.xfrm_acq_expires"); got != xfrmAcqExpires {
		t.Errorf("ordinary pod: net.core.xfrm_acq_expires = %s, want %s", got, xfrmAcqExpires)
	}
}

// TestUserNamespacePodStartsWithEveryKeyClass: a hostUsers: false pod
// with a UTS key (kernel.domainname, whose file stays owned by the host's
// root), an IPC key and ping_group_range starts in either mode, and every
// configured key is either in force inside the pod or listed as skipped
// with its reason. An ordinary pod on the same node still gets every key.
// (runc refused kernel.domainname in such pods: "open sysctl
// kernel.domainname file: reopen fd 10: permission denied".)
func TestUserNamespacePodStartsWithEveryKeyClass(t *testing.T) {
	want := map[string]string{
		"kernel.domainname":           "nri.test",
		"kernel.msgmax":               "16384",
		"net.ipv4.ping_group_range":   "0 2147483647",
		"net.ipv4.tcp_keepalive_time": "600",
	}
	clamped := map[string]string{"net.ipv4.ping_group_range": "0 65535"}
	startPlugin(t, defaultsYAML(want))
	id := runUserNamespacePod(t, "userns-all", "e2e-userns")
	skipped := containerAnnotations(t, id)[annotationSkipped]
	for _, key := range sortedKeys(want) {
		value := want[key]
		if v, ok := clamped[key]; ok {
			value = v
		}
		got := strings.Join(strings.Fields(readSysctl(t, id, key)), " ")
		switch {
		case got == value:
			t.Logf("%s = %s inside the user-namespace pod", key, got)
		case strings.Contains(skipped, key+" ("):
			t.Logf("%s skipped: %s (reads %s inside)", key, lineWith(strings.ReplaceAll(skipped, "; ", "\n"), key+" ("), got)
		default:
			t.Errorf("%s = %q inside the user-namespace pod: neither the configured %q nor listed as skipped (%s = %q)", key, got, value, annotationSkipped, skipped)
		}
	}

	ordinary := runPod(t, PodSpec{Name: "no-userns-all", Namespace: "e2e-userns"})
	oid := runContainer(t, ordinary, "app")
	got := readSysctls(t, oid, sortedKeys(want)...)
	for k, v := range got {
		got[k] = strings.Join(strings.Fields(v), " ") // the kernel prints ranges with a tab
	}
	wantSysctls(t, "ordinary pod", got, want)
}

// runUserNamespacePod runs a hostUsers: false pod (removed when the test
// ends) with one sleeping container, and returns the container's ID.
func runUserNamespacePod(t *testing.T, name, namespace string) string {
	t.Helper()
	c := getCluster(t)
	// The pod's root (host uid 100000) must be able to reach its rootfs.
	for _, dir := range []string{c.tmp, c.state, c.root} {
		if err := os.Chmod(dir, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	pod, err := c.runPodErr(PodSpec{Name: name, Namespace: namespace, UserNamespace: true, RuntimeHandler: usernsRuntimeHandler})
	if err != nil {
		t.Fatalf("user-namespace pod did not start: %v", err)
	}
	t.Cleanup(func() { c.removePod(pod.ID) })
	id, err := c.createContainerErr(pod, "app", []string{"sleep", "3600"})
	if err == nil {
		_, err = c.crictlRaw("start", id)
	}
	if err != nil {
		t.Fatalf("user-namespace container did not start: %v", err)
	}
	return id
}
