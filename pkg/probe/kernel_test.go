// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package probe

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

// Fresh reads a fresh namespace's values: the kernel's defaults, whatever
// this process's namespace holds, a per-interface key's from its stand-in,
// and nothing for a key a fresh namespace lacks.
func TestFreshReadsThrowAwayNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	got, err := Fresh([]string{"net.ipv4.tcp_keepalive_time", "kernel.msgmax", "net.ipv4.conf.eth0.rp_filter", "user.max_user_namespaces", "vm.swappiness"})
	if err != nil {
		t.Fatal(err)
	}
	if got["net.ipv4.tcp_keepalive_time"] != "7200" || got["kernel.msgmax"] != "8192" {
		t.Errorf("fresh values %v, want the kernel's 7200 and 8192", got)
	}
	stand, err := Fresh([]string{"net.ipv4.conf.default.rp_filter"})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := got["net.ipv4.conf.eth0.rp_filter"]; !ok || v != stand["net.ipv4.conf.default.rp_filter"] {
		t.Errorf("net.ipv4.conf.eth0.rp_filter = %q (%v), want conf.default's %q", v, ok, stand["net.ipv4.conf.default.rp_filter"])
	}
	for _, absent := range []string{"user.max_user_namespaces", "vm.swappiness"} {
		if v, ok := got[absent]; ok {
			t.Errorf("%s = %q in a fresh namespace, want it left out", absent, v)
		}
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the kernel probe needs root to create namespaces")
	}
}

func readlink(t *testing.T, path string) string {
	t.Helper()
	l, err := os.Readlink(path)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// noValues asks the probe about names alone.
func noValues(names ...string) map[string][]string {
	m := make(map[string][]string, len(names))
	for _, n := range names {
		m[n] = nil
	}
	return m
}

func TestKernel(t *testing.T) {
	needRoot(t)
	// A fresh network namespace has fewer net.core keys than the host's:
	// netdev_max_backlog is only in the initial one (checked on 6.x).
	if _, err := os.Stat("/proc/sys/net/core/netdev_max_backlog"); err != nil {
		t.Fatalf("host has no net.core.netdev_max_backlog: %v", err)
	}
	names := []string{
		"net.ipv4.tcp_keepalive_time",
		"net.ipv4.tcp_keepalive_tme",
		"net.core.netdev_max_backlog",
		"net.core.somaxconn",
		"kernel.msgmax",
		"kernel.sem",
		"fs.mqueue.msg_max",
		"kernel.domainname",
		"net.ipv4.conf.eth0.rp_filter",
		"net.ipv4.conf.eth0/100.rp_filter",
		"net.ipv4.conf.all.rp_filter",
		"net.ipv6.conf.eth0.accept_ra",
		"net.ipv4.neigh.eth0.gc_stale_time",
		"net.ipv6.neigh.eth0.retrans_time_ms",
		// Table-wide neigh entries exist only in the host's namespace.
		"net.ipv4.neigh.default.gc_thresh1",
		"net.ipv4.neigh.eth0.gc_thresh1",
		"kernel.shmbogus",
		// Present in a fresh netns but read-only there (6.x).
		"net.core.rmem_max",
		// Directories pass sysctl.ValidateName; only the probe can
		// tell they hold no value.
		"net.ipv4",
		"net.core",
		"net.ipv4.conf.default",
		// Not namespaced: not probed, even when missing.
		"vm.no_such_key",
		"kernel.core_pattern",
	}
	missing, _, err := Kernel(noValues(names...))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]error{
		"net.ipv4.tcp_keepalive_tme":        sysctl.ErrMissing,
		"net.core.netdev_max_backlog":       sysctl.ErrMissing,
		"net.ipv4.neigh.default.gc_thresh1": sysctl.ErrMissing,
		"net.ipv4.neigh.eth0.gc_thresh1":    sysctl.ErrMissing,
		"kernel.shmbogus":                   sysctl.ErrMissing,
		"net.core.rmem_max":                 sysctl.ErrReadOnly,
		"net.ipv4":                          sysctl.ErrNotASysctl,
		"net.core":                          sysctl.ErrNotASysctl,
		"net.ipv4.conf.default":             sysctl.ErrNotASysctl,
	}
	if !reflect.DeepEqual(missing, want) {
		t.Errorf("Kernel refused = %v, want %v", missing, want)
	}
}

// Only a regular file that opens for writing passes; any other outcome is a
// refusal with its reason, never a silent pass.
func TestKernelRefusal(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	writable := filepath.Join(t.TempDir(), "writable")
	if err := os.WriteFile(writable, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path string
		want error // nil: passes
	}{
		{writable, nil},
		{t.TempDir(), sysctl.ErrNotASysctl},
		{"/dev/null", errNotRegular},
		{"/proc/sys/net/no_such_key", sysctl.ErrMissing},
		// A running program cannot be opened for writing: ETXTBSY is
		// not one of the expected errors, and must not pass.
		{self, unix.ETXTBSY},
	}
	for _, tt := range tests {
		got := kernelRefusal(tt.path)
		if (tt.want == nil) != (got == nil) || (tt.want != nil && !errors.Is(got, tt.want)) {
			t.Errorf("kernelRefusal(%s) = %v, want %v", tt.path, got, tt.want)
		}
	}
	const wantBusy = "cannot be opened for writing in a fresh pod namespace: text file busy"
	if got := kernelRefusal(self); got == nil || got.Error() != wantBusy {
		t.Errorf("kernelRefusal(%s) = %v, want %q", self, got, wantBusy)
	}
}

func TestKernelNoNames(t *testing.T) {
	needRoot(t)
	missing, stored, err := Kernel(nil)
	if err != nil {
		t.Fatal(err)
	}
	if missing == nil || len(missing) != 0 || stored == nil || len(stored) != 0 {
		t.Errorf("Kernel(nil) = %#v, %#v, want empty maps", missing, stored)
	}
}

// The probe must run on a thread that dies afterwards: no thread of this
// process may stay in the throw-away namespaces.
func TestKernelLeavesNamespaces(t *testing.T) {
	needRoot(t)
	want := readlink(t, "/proc/self/ns/net")
	wantIPC := readlink(t, "/proc/self/ns/ipc")
	for i := 0; i < 20; i++ {
		if _, _, err := Kernel(map[string][]string{"net.core.somaxconn": {"4096"}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := readlink(t, "/proc/self/ns/net"); got != want {
		t.Fatalf("process network namespace changed from %s to %s", want, got)
	}
	// A probe thread may still be on its way out; wait until it is gone.
	// This bounds thread exit only; it is not a speed requirement.
	deadline := time.Now().Add(60 * time.Second)
	for {
		stray := strayThreads(t, want, wantIPC)
		if len(stray) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads still in other namespaces: %v", stray)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Threads the pool hands out now are in the original namespace.
	for i := 0; i < 4*runtime.GOMAXPROCS(0); i++ {
		got := make(chan string)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			l, _ := os.Readlink("/proc/thread-self/ns/net")
			got <- l
		}()
		if l := <-got; l != want {
			t.Fatalf("a pooled thread is in network namespace %s, want %s", l, want)
		}
	}
}

// strayThreads lists this process's threads whose network or IPC
// namespace is not the given one.
func strayThreads(t *testing.T, net, ipc string) []string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*")
	if err != nil {
		t.Fatal(err)
	}
	var stray []string
	for _, task := range tasks {
		for ns, want := range map[string]string{"net": net, "ipc": ipc} {
			l, err := os.Readlink(filepath.Join(task, "ns", ns))
			if err != nil {
				continue // the thread has exited meanwhile
			}
			if l != want {
				stray = append(stray, task+": "+l)
			}
		}
	}
	return stray
}

// probeInReadOnlyProcSysEnv makes the test binary, re-run in a mount
// namespace whose /proc/sys is read-only (as in every unprivileged
// container), run both probes and print what they refuse.
const probeInReadOnlyProcSysEnv = "NRI_SYSCTL_TEST_READONLY_PROC_SYS"

// In a DaemonSet pod the plugin's /proc/sys is read-only. The probes still
// tell what a pod may set: the kernel probe and host root's view through a
// thread-private read-write remount; for runc's view a key that meets only
// the read-only mount is not held against it. (Before, every key was refused as read-only and the
// plugin refused to start in namespace mode.)
func TestProbesThroughReadOnlyProcSys(t *testing.T) {
	if os.Getenv(probeInReadOnlyProcSysEnv) == "1" {
		names := []string{"net.ipv4.tcp_keepalive_time", "kernel.msgmax", "kernel.domainname"}
		values := noValues(names...)
		values["net.ipv4.tcp_keepalive_time"] = []string{"abc"}
		kernel, stored, err := Kernel(values)
		if err != nil {
			t.Fatal(err)
		}
		// Values are written through the thread's read-write remount.
		_, judged := sysctl.Judge("abc", stored["net.ipv4.tcp_keepalive_time"]["abc"])
		fmt.Printf("value: %v\n", judged)
		res, err := UserNamespace(namesForBoth(names...))
		users := res.Refused
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("kernel=%v host=%v pod=%v\n", kernel, users[sysctl.WriterHost], users[sysctl.WriterInPod])
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs util-linux unshare")
	}
	script := `mount --make-rprivate / && mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && exec "$0" -test.run '^TestProbesThroughReadOnlyProcSys$' -test.v`
	cmd := exec.Command("unshare", "-m", "sh", "-c", script, os.Args[0])
	cmd.Env = append(os.Environ(), probeInReadOnlyProcSysEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probes in a mount namespace with a read-only /proc/sys: %v\n%s", err, out)
	}
	// The same as with a writable /proc/sys: the permission check comes
	// before the read-only one, so runc's refusal still shows.
	want := "kernel=map[] host=map[kernel.msgmax:" + ErrDeniedInUserNamespace.Error() + "] pod=map[kernel.domainname:" + ErrDeniedInUserNamespace.Error() + "]"
	if !strings.Contains(string(out), want) {
		t.Fatalf("probe results through a read-only /proc/sys:\n%s\nwant a line %q", out, want)
	}
	if want := `value: the kernel refuses "abc" (invalid argument)`; !strings.Contains(string(out), want) {
		t.Fatalf("value probe through a read-only /proc/sys:\n%s\nwant a line %q", out, want)
	}
}
