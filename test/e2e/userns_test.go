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
func TestUserNamespacePod(t *testing.T) {
	c := getCluster(t)
	const key = "net.ipv4.ping_group_range"
	startPlugin(t, "sysctls:\n  "+key+": \"0 2147483647\"\n  net.ipv4.tcp_keepalive_time: \"600\"\n")
	// The pod's root (host uid 100000) must be able to reach its rootfs.
	for _, dir := range []string{c.tmp, c.state, c.root} {
		if err := os.Chmod(dir, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(usernsRunc(c)); err != nil {
		t.Fatalf("runc %s for user-namespace pods is missing: run test/setup.sh: %v", usernsRuncVersion, err)
	}
	pod, err := c.runPodErr(PodSpec{Name: "userns", Namespace: "e2e-userns", UserNamespace: true, RuntimeHandler: usernsRuntimeHandler})
	if err != nil {
		t.Fatalf("user-namespace pod: %v", err)
	}
	t.Cleanup(func() { c.removePod(pod.ID) })
	id, err := c.createContainerErr(pod, "app", []string{"sleep", "3600"})
	if err == nil {
		_, err = c.crictlRaw("start", id)
	}
	if err != nil {
		t.Fatalf("user-namespace container: %v", err)
	}
	if got := strings.Join(strings.Fields(readSysctl(t, id, key)), " "); got != "0 65535" {
		t.Errorf("%s = %q, want the clamped \"0 65535\"", key, got)
	}
	if got := readSysctl(t, id, "net.ipv4.tcp_keepalive_time"); got != "600" {
		t.Errorf("tcp_keepalive_time = %s, want 600", got)
	}
}
