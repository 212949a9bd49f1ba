package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestUserNamespacePod: in a pod with its own user namespace,
// net.ipv4.ping_group_range is clamped to the pod's gid mapping (0-65535
// here), as CRI-O does. Skipped, with what failed, where the runtime stack
// cannot run user-namespace pods (Debian 12's runc 1.1.5 lacks id-mapped
// mounts, which containerd 2.x needs for them).
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
	pod, err := c.runPodErr(PodSpec{Name: "userns", Namespace: "e2e-userns", UserNamespace: true})
	if err != nil {
		t.Skipf("user-namespace pods cannot run on this machine (runc %s): %v", runcVersion(), firstLine(err.Error(), "RunPodSandbox"))
	}
	t.Cleanup(func() { c.removePod(pod.ID) })
	id, err := c.createContainerErr(pod, "app", []string{"sleep", "3600"})
	if err == nil {
		_, err = c.crictlRaw("start", id)
	}
	if err != nil {
		t.Skipf("user-namespace containers cannot run on this machine (runc %s): %v", runcVersion(), firstLine(err.Error(), "rpc error"))
	}
	if got := readSysctl(t, id, key); got != "0 65535" {
		t.Errorf("%s = %q, want the clamped \"0 65535\"", key, got)
	}
	if got := readSysctl(t, id, "net.ipv4.tcp_keepalive_time"); got != "600" {
		t.Errorf("tcp_keepalive_time = %s, want 600", got)
	}
}

func runcVersion() string {
	out, err := exec.Command("runc", "--version").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
}

// firstLine returns the first line of s containing marker, or s's first line.
func firstLine(s, marker string) string {
	lines := strings.Split(s, "\n")
	for _, l := range lines {
		if strings.Contains(l, marker) {
			return strings.TrimSpace(l)
		}
	}
	return strings.TrimSpace(lines[0])
}
