package nswrite

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// newNetns makes a named network namespace with iproute2 and removes it when
// the test ends, pass or fail.
func newNetns(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip")
	}
	name := fmt.Sprintf("nri-sysctl-test-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", name).Run() })
	return "/var/run/netns/" + name
}

func readIn(t *testing.T, nsName, key string) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", nsName, "cat", sysctl.Path(key)).CombinedOutput()
	if err != nil {
		t.Fatalf("reading %s in %s: %v: %s", key, nsName, err, out)
	}
	return strings.TrimSpace(string(out))
}

func hostValue(t *testing.T, key string) string {
	t.Helper()
	b, err := os.ReadFile(sysctl.Path(key))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestWriteIntoPodNetns(t *testing.T) {
	path := newNetns(t)
	name := path[strings.LastIndex(path, "/")+1:]
	hostBefore := hostValue(t, "net.ipv4.tcp_keepalive_time")
	want := "601"
	if hostBefore == want {
		want = "602"
	}
	errs := Write(Target{sysctl.Net: {Path: path}}, []sysctl.Sysctl{sysctl.New("net.ipv4.tcp_keepalive_time", want)})
	if len(errs) != 0 {
		t.Fatalf("Write: %v", errs)
	}
	if got := readIn(t, name, "net.ipv4.tcp_keepalive_time"); got != want {
		t.Fatalf("inside the netns: %s, want %s", got, want)
	}
	if got := hostValue(t, "net.ipv4.tcp_keepalive_time"); got != hostBefore {
		t.Fatalf("host value changed: %s -> %s", hostBefore, got)
	}
	// The caller's own thread must not have moved.
	if got := hostValue(t, "net.ipv4.tcp_keepalive_time"); got != hostBefore {
		t.Fatalf("caller now sees %s", got)
	}
}

func TestWriteReportsEachFailedKey(t *testing.T) {
	path := newNetns(t)
	errs := Write(Target{sysctl.Net: {Path: path}}, []sysctl.Sysctl{
		sysctl.New("net.ipv4.tcp_keepalive_time", "603"),
		sysctl.New("net.ipv4.no_such_key", "1"),
		sysctl.New("net.ipv4.tcp_keepalive_intvl", "not-a-number"),
		sysctl.New("kernel.msgmax", "1"),
	})
	got := map[string]string{}
	for _, e := range errs {
		got[e.Key] = e.Err.Error()
	}
	if len(got) != 3 {
		t.Fatalf("want 3 failures, got %v", got)
	}
	if !strings.Contains(got["net.ipv4.no_such_key"], "no such file") ||
		!strings.Contains(got["net.ipv4.tcp_keepalive_intvl"], "invalid argument") ||
		!strings.Contains(got["kernel.msgmax"], "pod has no ipc namespace of its own") {
		t.Fatalf("failures do not say why: %v", got)
	}
}

func TestWriteRefusesTheHostNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	before := hostValue(t, "net.ipv4.tcp_keepalive_time")
	errs := Write(Target{sysctl.Net: {Path: "/proc/self/ns/net"}}, []sysctl.Sysctl{sysctl.New("net.ipv4.tcp_keepalive_time", "604")})
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "is the host's network namespace") {
		t.Fatalf("want a refusal, got %v", errs)
	}
	if after := hostValue(t, "net.ipv4.tcp_keepalive_time"); after != before {
		t.Fatalf("HOST VALUE CHANGED: %s -> %s", before, after)
	}
	var we WriteError
	if !errors.As(errs[0], &we) {
		t.Fatal("not a WriteError")
	}
}
