// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podns

import (
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
		"Write": writeLocked,
		"Visit": func(t Target, list []sysctl.Sysctl) []WriteError {
			return visitLocked(t, []string{list[0].Key()}, func(map[string]Value) []sysctl.Sysctl { return list })
		},
	} {
		t.Run(name, func(t *testing.T) { writeThroughReadOnlyProcSys(t, write) })
	}
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
