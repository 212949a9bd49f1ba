// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package nsthread runs code on an OS thread that may change namespaces and
// is thrown away afterwards, so no other goroutine ever runs in them.
package nsthread

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

// Run calls fn on a locked OS thread that is never unlocked, so Go ends the
// thread with the goroutine instead of reusing it. The main thread is the
// exception: Go cannot end it and would park it for good, still in whatever
// namespaces fn entered (and keep a pod's netns alive). On the main thread
// Run holds the thread and calls fn from another goroutine, which cannot
// be scheduled there meanwhile. The thread runs at its caller's nice
// value, so that Run from Background work stays in the background.
func Run(fn func()) {
	nice := threadNice()
	done := make(chan struct{})
	go onThread(func() {
		setThreadNice(nice)
		fn()
	}, done)
	<-done
}

func onThread(fn func(), done chan<- struct{}) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		inner := make(chan struct{})
		go onThread(fn, inner)
		<-inner
		runtime.UnlockOSThread()
		close(done)
		return
	}
	defer close(done)
	fn()
}

// BackgroundNice is the nice value of Background's thread: the lowest
// priority, so the runtime's processes and the plugin's handlers, at 0,
// take the CPU first whenever they want it.
const BackgroundNice = 19

// Background calls fn as Run does, on a thread at BackgroundNice: for work
// beside the runtime's requests, never on their path, such as bringing
// running pods to a new config. The namespace threads fn's Run calls make
// are at BackgroundNice too.
func Background(fn func()) {
	Run(func() {
		setThreadNice(BackgroundNice)
		fn()
	})
}

// threadNice is the calling thread's nice value (Linux keeps one per
// thread); 0 if it cannot be read.
func threadNice() int {
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		return 0
	}
	return 20 - prio // the raw system call returns 20 - nice
}

// setThreadNice sets the calling (locked, thrown-away) thread's nice
// value; raising it needs no privilege, and a failure leaves it at the
// process's, which is where it would be anyway.
func setThreadNice(nice int) {
	if nice != 0 {
		_ = unix.Setpriority(unix.PRIO_PROCESS, 0, nice)
	}
}

// procSys is where sysctls are written.
const procSys = "/proc/sys"

// WritableProcSys gives the calling (locked, thrown-away) thread a writable /proc/sys when the
// plugin's own is read-only, as a container runtime mounts it in every
// unprivileged container (a DaemonSet pod in namespace mode). The thread
// gets a mount namespace of its own, in which /proc/sys is remounted
// read-write; the thread is thrown away after the write (nsthread), and
// nothing changes in the plugin's or the host's mounts. What /proc/sys/net
// shows follows the thread's network namespace, whatever the mount, so the
// pod's values are the ones written. Needs CAP_SYS_ADMIN, as setns does.
// It does nothing where /proc/sys is writable (on the host).
func WritableProcSys() error {
	var st unix.Statfs_t
	if err := unix.Statfs(procSys, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", procSys, err)
	}
	if st.Flags&unix.ST_RDONLY == 0 {
		return nil
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("%s is mounted read-only (in a container?), and a mount namespace to remount it in failed: %w", procSys, err)
	}
	// Nothing done in this namespace may reach the one it was copied from.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("making the thread's mounts private: %w", err)
	}
	keep := uintptr(st.Flags) & (unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	if err := unix.Mount("", procSys, "", unix.MS_REMOUNT|unix.MS_BIND|keep, ""); err != nil {
		return fmt.Errorf("%s is mounted read-only (in a container?), and remounting it read-write failed: %w", procSys, err)
	}
	return nil
}

// pidInitInode is the nsfs inode number of the host's (initial) pid
// namespace, fixed by the kernel since 3.8 (include/linux/proc_ns.h).
const pidInitInode = 0xEFFFFFFC

// ErrNotHostPIDNamespace marks a process in a pid namespace of its own (a
// pod without hostPID): its pid 1 is not the host's init, so the host's
// namespaces are out of its reach.
var ErrNotHostPIDNamespace = errors.New("this process has a pid namespace of its own (a pod without hostPID), so the host's namespaces are out of its reach")

// isKthreadd tells whether pid is the kernel's thread creator.
func isKthreadd(pid int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && string(comm) == "kthreadd\n"
}

// EnterHost moves the calling (locked, thrown-away) thread into the host's
// network, IPC and UTS namespaces, so that /proc/sys shows the host's
// values: a plugin in a pod (or under `unshare -n`) sees its own
// namespaces' otherwise. A namespace that is the kernel's initial one
// (sysctl.Namespace.InitialInode) is the host's already; any other is
// left for pid 1's, which is the host's init only in the host's pid
// namespace, checked first. Entering needs CAP_SYS_ADMIN, and
// CAP_SYS_PTRACE to open another process's namespaces.
func EnterHost() error {
	var pid unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &pid); err != nil {
		return fmt.Errorf("reading /proc/self/ns/pid: %w", err)
	}
	for _, ns := range []sysctl.Namespace{sysctl.Net, sysctl.IPC, sysctl.UTS} {
		var own unix.Stat_t
		ownPath := "/proc/thread-self/ns/" + ns.ProcName()
		if err := unix.Stat(ownPath, &own); err != nil {
			return fmt.Errorf("reading %s: %w", ownPath, err)
		}
		if own.Dev == pid.Dev && own.Ino == ns.InitialInode() {
			continue // the host's already
		}
		if pid.Ino != pidInitInode {
			return ErrNotHostPIDNamespace
		}
		path := "/proc/1/ns/" + ns.ProcName()
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if (errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)) && isKthreadd(2) {
			path = "/proc/2/ns/" + ns.ProcName()
			fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		}
		if err != nil {
			return fmt.Errorf("opening the host's %s namespace (%s): %w", ns, path, err)
		}
		err = unix.Setns(fd, ns.CloneFlag())
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("entering the host's %s namespace (%s): %w", ns, path, err)
		}
	}
	return nil
}
