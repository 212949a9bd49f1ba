// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 0 && os.Args[0] == writeFromOwnNetnsArg0 {
		os.Exit(writeFromOwnNetns())
	}
	os.Exit(m.Run())
}

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

// markerFor is a value for key that the host does not hold now and that no
// other test on the machine writes: only a write that wrongly reached the
// host puts it there, while other tests may change the host's value
// meanwhile.
func markerFor(t *testing.T, key string) string {
	t.Helper()
	markers := map[string][]string{
		"net.ipv4.tcp_keepalive_time": {"6011", "6012"},
		"kernel.msgmax":               {"8111", "8112"},
		"kernel.domainname":           {"nri-sysctl-guard-1", "nri-sysctl-guard-2"},
	}[key]
	if markers == nil {
		t.Fatalf("no marker for %s", key)
	}
	if hostValue(t, key) == markers[0] {
		return markers[1]
	}
	return markers[0]
}

// checkHostHasNot fails the test if the host's key holds marker, and then
// puts back the value it had before.
func checkHostHasNot(t *testing.T, key, marker, before string) {
	t.Helper()
	if hostValue(t, key) != marker {
		return
	}
	if err := os.WriteFile(sysctl.Path(key), []byte(before), 0o644); err != nil {
		t.Errorf("restoring the host's %s to %s: %v", key, before, err)
	}
	t.Fatalf("HOST VALUE CHANGED: the host's %s was set to %s", key, marker)
}

func TestWriteIntoPodNetns(t *testing.T) {
	path := newNetns(t)
	name := path[strings.LastIndex(path, "/")+1:]
	const key = "net.ipv4.tcp_keepalive_time"
	hostBefore, want := hostValue(t, key), markerFor(t, key)
	errs := Write(Target{sysctl.Net: {Path: path}}, []sysctl.Sysctl{sysctl.New(key, want)})
	// Neither the host nor the caller's own thread has moved.
	checkHostHasNot(t, key, want, hostBefore)
	if len(errs) != 0 {
		t.Fatalf("Write: %v", errs)
	}
	if got := readIn(t, name, key); got != want {
		t.Fatalf("inside the netns: %s, want %s", got, want)
	}
}

func TestWriteReportsEachFailedKey(t *testing.T) {
	forEachProcSys(t, writeReportsEachFailedKey)
}

func writeReportsEachFailedKey(t *testing.T) {
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

// Targets that are the host's namespace (pid 1's, or this process's, which
// runs in the host's) are refused, by path or by pid, and the host's
// value stays.
func TestWriteRefusesTheHostNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	tests := []struct {
		ns     sysctl.Namespace
		ref    NamespaceRef
		key    string
		pidOne bool
	}{
		{sysctl.Net, NamespaceRef{Path: "/proc/self/ns/net"}, "net.ipv4.tcp_keepalive_time", false},
		{sysctl.Net, NamespaceRef{Path: "/proc/1/ns/net"}, "net.ipv4.tcp_keepalive_time", true},
		{sysctl.Net, NamespaceRef{Pid: os.Getpid()}, "net.ipv4.tcp_keepalive_time", false},
		{sysctl.UTS, NamespaceRef{Pid: 1}, "kernel.domainname", true},
		{sysctl.IPC, NamespaceRef{Pid: os.Getpid()}, "kernel.msgmax", false},
	}
	for _, tc := range tests {
		before, marker := hostValue(t, tc.key), markerFor(t, tc.key)
		errs := Write(Target{tc.ns: tc.ref}, []sysctl.Sysctl{sysctl.New(tc.key, marker)})
		checkHostHasNot(t, tc.key, marker, before)
		if len(errs) != 1 {
			t.Fatalf("%+v: want one refusal, got %v", tc.ref, errs)
		}
		err := errs[0].Err
		// Some sandboxes keep pid 1's namespaces out of root's reach:
		// then the open already fails.
		if tc.pidOne && errors.Is(err, unix.EACCES) {
			continue
		}
		if !errors.Is(err, ErrNotPodNamespace) || !strings.Contains(err.Error(), "is the host's "+tc.ns.String()+" namespace") {
			t.Errorf("%+v: want the host's namespace refused, got %v", tc.ref, err)
		}
	}
}

// A sandbox process that has exited is not written through: its pid may
// already be another pod's.
func TestWriteRefusesAnExitedSandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	pid := sleep.Process.Pid
	sleep.Process.Kill()
	sleep.Wait()
	errs := Write(Target{sysctl.UTS: {Pid: pid}}, []sysctl.Sysctl{sysctl.New("kernel.domainname", "exited")})
	if len(errs) != 1 || !errors.Is(errs[0].Err, ErrSandboxExited) {
		t.Fatalf("want %v, got %v", ErrSandboxExited, errs)
	}
	if want := fmt.Sprintf(`kernel.domainname "exited": uts namespace of pid %d: the pod sandbox process has exited`, pid); errs[0].Error() != want {
		t.Fatalf("error %q, want %q", errs[0].Error(), want)
	}
}

// startSandbox starts a process in its own IPC and UTS namespaces, as a
// pod sandbox, and stops it by pid when the test ends.
func startSandbox(t *testing.T) int {
	t.Helper()
	sandbox := exec.Command("sleep", "60")
	sandbox.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS}
	if err := sandbox.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sandbox.Process.Kill()
		sandbox.Wait()
	})
	return sandbox.Process.Pid
}

func TestWriteThroughSandboxPid(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	pid := startSandbox(t)
	domain, msgmax := markerFor(t, "kernel.domainname"), markerFor(t, "kernel.msgmax")
	hostDomain, hostMsgmax := hostValue(t, "kernel.domainname"), hostValue(t, "kernel.msgmax")
	errs := Write(Target{sysctl.IPC: {Pid: pid}, sysctl.UTS: {Pid: pid}}, []sysctl.Sysctl{
		sysctl.New("kernel.domainname", domain),
		sysctl.New("kernel.msgmax", msgmax),
	})
	checkHostHasNot(t, "kernel.domainname", domain, hostDomain)
	checkHostHasNot(t, "kernel.msgmax", msgmax, hostMsgmax)
	if len(errs) != 0 {
		t.Fatalf("Write: %v", errs)
	}
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-i", "-u", "cat", "/proc/sys/kernel/domainname", "/proc/sys/kernel/msgmax").CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter: %v: %s", err, out)
	}
	if got := strings.Fields(string(out)); !reflect.DeepEqual(got, []string{domain, msgmax}) {
		t.Fatalf("inside the sandbox: %q, want %s %s", got, domain, msgmax)
	}
}

// writeFromOwnNetnsArg0 makes the test binary write into the network
// namespace at os.Args[1] from a network namespace of its own (see
// TestMain), as a plugin running in a container does.
const writeFromOwnNetnsArg0 = "nri-sysctl-test-write-from-own-netns"

func writeFromOwnNetns() int {
	if len(os.Args) != 4 {
		return 2
	}
	for _, e := range Write(Target{sysctl.Net: {Path: os.Args[1]}}, []sysctl.Sysctl{sysctl.New(os.Args[2], os.Args[3])}) {
		fmt.Println(e.Err)
	}
	return 0
}

// A plugin in its own network namespace (a container) must still refuse
// the host's, and its own.
func TestWriteFromAPrivateNamespaceRefusesTheHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	const key = "net.ipv4.tcp_keepalive_time"
	before, marker := hostValue(t, key), markerFor(t, key)
	tests := []struct{ target, want string }{
		{fmt.Sprintf("/proc/%d/ns/net", os.Getpid()), "is the host's network namespace"},
		{"/proc/self/ns/net", "is the plugin's own network namespace"},
	}
	for _, tc := range tests {
		cmd := exec.Command("/proc/self/exe", tc.target, key, marker)
		cmd.Args[0] = writeFromOwnNetnsArg0
		cmd.Env = []string{}
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
		out, err := cmd.CombinedOutput()
		checkHostHasNot(t, key, marker, before)
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if got := strings.TrimSpace(string(out)); got != "refusing to write, "+ErrNotPodNamespace.Error()+": "+tc.target+" "+tc.want {
			t.Errorf("writing into %s from a private netns: %q, want a refusal (%s)", tc.target, got, tc.want)
		}
	}
}

// A list and the empty value are values like any other: a list is
// written whole, and the empty value clears it (a write of no bytes would
// change nothing).
func TestWriteListThenEmptyValue(t *testing.T) {
	path := newNetns(t)
	target := Target{sysctl.Net: {Path: path}}
	const key, list = "net.ipv4.ip_local_reserved_ports", "30000-30010,31000"
	for _, want := range []string{list, ""} {
		if errs := Write(target, []sysctl.Sysctl{sysctl.New(key, want)}); len(errs) != 0 {
			t.Fatalf("writing %q: %v", want, errs)
		}
		if got := Read(target, []string{key})[key]; got.Err != nil || got.Value != want {
			t.Errorf("after writing %q: read %q (%v)", want, got.Value, got.Err)
		}
	}
}
