// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podns

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/nsthread"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

// A DaemonSet pod sees /proc/sys read-only (the runtime mounts it so in
// every unprivileged container). Write still reaches the pod's namespace,
// and the test process's own /proc/sys is left as it was.
func TestWriteThroughReadOnlyProcSys(t *testing.T) {
	// Write makes /proc/sys writable before it enters the namespaces;
	// Visit after it has entered them to read.
	for name, write := range map[string]func(Target, []sysctl.Sysctl) []WriteError{
		"Write": func(t Target, list []sysctl.Sysctl) []WriteError { return writeLocked(linuxKernel{}, t, list) },
		"Visit": func(t Target, list []sysctl.Sysctl) []WriteError {
			return visitLocked(linuxKernel{}, t, []string{list[0].Key()}, func(map[string]Value) []sysctl.Sysctl { return list })
		},
	} {
		t.Run(name, func(t *testing.T) {
			forEachProcSys(t, func(t *testing.T) { writeThroughReadOnlyProcSys(t, write) })
		})
	}
}

// forEachProcSys runs test through a visit's own proc instance, checking
// that one was mounted, and again through the plugin's /proc/sys, as where
// the kernel or a seccomp profile refuses the instance. Each subtest sets
// openProcInstance; the cleanup puts the real one back.
func forEachProcSys(t *testing.T, test func(t *testing.T)) {
	mount := openProcInstance
	t.Cleanup(func() { openProcInstance = mount })
	t.Run("own proc instance", func(t *testing.T) {
		fd, err := mount()
		if err != nil {
			t.Skipf("cannot mount a proc instance here: %v", err)
		}
		unix.Close(fd)
		mounted := 0
		openProcInstance = func() (int, error) {
			mounted++
			return mount()
		}
		test(t)
		if mounted == 0 {
			t.Error("no proc instance of the visit's own was mounted")
		}
	})
	t.Run("plugin's /proc/sys", func(t *testing.T) {
		openProcInstance = func() (int, error) { return -1, unix.EPERM }
		test(t)
	})
}

// A visit's proc instance is gone when the visit ends: no fd is left open
// (an open fd would keep the instance and its dentries).
func TestVisitLeavesNoProcInstanceOpen(t *testing.T) {
	netns := newNetns(t)
	const key = "net.ipv4.tcp_keepalive_time"
	before := openFds(t)
	for range 20 {
		Visit(Target{sysctl.Net: {Path: netns}}, []string{key}, func(map[string]Value) []sysctl.Sysctl {
			return []sysctl.Sysctl{sysctl.New(key, "601")}
		})
	}
	if after := openFds(t); after > before {
		t.Fatalf("%d fds open after 20 visits, %d before", after, before)
	}
	if got := readIn(t, filepath.Base(netns), key); got != "601" {
		t.Fatalf("%s in the pod's netns = %s, want 601", key, got)
	}
}

func openFds(t *testing.T) int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

func writeThroughReadOnlyProcSys(t *testing.T, write func(Target, []sysctl.Sysctl) []WriteError) {
	netns := newNetns(t)
	key := "net.ipv4.tcp_keepalive_time"
	want := "4321"
	if hostValue(t, key) == want {
		t.Skipf("host already has %s=%s", key, want)
	}
	var setupErr error
	var errs []WriteError
	nsthread.Run(func() {
		// The container: a mount namespace whose /proc/sys is read-only.
		if setupErr = unix.Unshare(unix.CLONE_NEWNS); setupErr != nil {
			return
		}
		if setupErr = unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); setupErr != nil {
			return
		}
		if setupErr = unix.Mount("/proc/sys", "/proc/sys", "", unix.MS_BIND, ""); setupErr != nil {
			return
		}
		if setupErr = unix.Mount("", "/proc/sys", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); setupErr != nil {
			return
		}
		errs = write(Target{sysctl.Net: {Path: netns}}, []sysctl.Sysctl{sysctl.New(key, want)})
	})
	if setupErr != nil {
		t.Skipf("cannot make a read-only /proc/sys to test with: %v", setupErr)
	}
	if len(errs) != 0 {
		t.Fatalf("write through a read-only /proc/sys: %v", errs)
	}
	if got := readIn(t, filepath.Base(netns), key); got != want {
		t.Fatalf("%s in the pod's netns = %s, want %s", key, got, want)
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/proc/sys", &st); err != nil {
		t.Fatal(err)
	}
	if st.Flags&unix.ST_RDONLY != 0 {
		t.Fatal("the test process's own /proc/sys changed")
	}
}

func TestUnderSeccompFilter(t *testing.T) {
	for status, want := range map[string]bool{
		"Name:\tnri-sysctl\nSeccomp:\t0\nSeccomp_filters:\t0\n": false,
		"Name:\tnri-sysctl\nSeccomp:\t2\nSeccomp_filters:\t1\n": true,
		"Seccomp:\t1\n":       true,
		"Name:\tnri-sysctl\n": false, // a kernel without seccomp
	} {
		if got := underSeccompFilter(status); got != want {
			t.Errorf("underSeccompFilter(%q) = %v, want %v", status, got, want)
		}
	}
}

// Under a seccomp filter no proc instance is tried (a filter may kill
// the plugin at fsopen), and a visit still reads and writes the pod.
func TestNoProcInstanceUnderSeccompFilter(t *testing.T) {
	filtered := seccompFiltered
	t.Cleanup(func() { seccompFiltered = filtered })
	seccompFiltered = func() bool { return true }
	if fd, err := openProcInstance(); !errors.Is(err, errSeccompFiltered) {
		if err == nil {
			unix.Close(fd)
		}
		t.Fatalf("openProcInstance under a seccomp filter: %v, want %v", err, errSeccompFiltered)
	}
	if ps := openProcSys(); ps.dir >= 0 {
		ps.Close()
		t.Fatal("a visit under a seccomp filter has a proc instance of its own")
	}
	netns := newNetns(t)
	const key = "net.ipv4.tcp_keepalive_time"
	if errs := Write(Target{sysctl.Net: {Path: netns}}, []sysctl.Sysctl{sysctl.New(key, "602")}); len(errs) != 0 {
		t.Fatalf("Write: %v", errs)
	}
	if got := readIn(t, filepath.Base(netns), key); got != "602" {
		t.Fatalf("%s in the pod's netns = %s, want 602", key, got)
	}
}
