// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package podns opens, checks and enters a pod's own namespaces from the
// host, to write its sysctls there (namespace mode, for runtimes that drop
// NRI sysctl adjustments) or to read them back (audit --read). Every way
// in goes through enter: the pod's own namespace, held by a path or a
// pidfd, never the host's or the plugin's own.
package podns

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

// Target holds where to find each namespace the pod has to itself. A kind
// missing from it is one the pod shares with the host: keys for it are
// refused.
type Target map[sysctl.Namespace]NamespaceRef

// NamespaceRef is how to reach one namespace: by Path, a bind mount that
// pins it (the network namespace has one), or else through Pid, a process
// in it (the pod sandbox's).
type NamespaceRef struct {
	Path string
	Pid  int
	// Pidfd, when above 0, is a pidfd for Pid taken when the pid was
	// first seen: a process that exited since is caught even when its
	// pid now names another. Its owner closes it.
	Pidfd int
	// NetPath, when set, is the pod's network namespace, which Pid must
	// still be in: a pid reused by another pod's (or the host's)
	// process is refused. A pidfd alone cannot tell that when it was
	// taken late.
	NetPath string
	// ID, when set, is the namespace as first seen (Hold): one that is
	// not that namespace any more is refused.
	ID NamespaceID
}

// enterable lists the namespaces a thread of the host can enter for a
// pod: a multi-threaded process cannot enter a user namespace, and a user
// namespace's sysctls are not the pod's to set from the host.
var enterable = []sysctl.Namespace{sysctl.Net, sysctl.IPC, sysctl.UTS}

// entered enters each namespace once for a run of keys on one locked
// thread, and remembers the outcome: a key of a namespace that could not
// be entered gets that namespace's error.
type entered struct {
	k    Kernel
	t    Target
	verb string // "write" or "read", for the error on a user namespace
	errs map[sysctl.Namespace]error
}

func newEntered(k Kernel, t Target, verb string) *entered {
	return &entered{k: k, t: t, verb: verb, errs: map[sysctl.Namespace]error{}}
}

// into moves the thread into the namespace key lives in.
func (e *entered) into(key string) error {
	ns := sysctl.NamespaceOf(key)
	if err, done := e.errs[ns]; done {
		return err
	}
	err := setns(e.k, e.t, ns, e.verb)
	e.errs[ns] = err
	return err
}

// setns moves the calling (locked) thread into the pod's namespace for ns.
// It checks the namespace it has open, not a path that could meanwhile
// name another one, and enters that same fd.
func setns(k Kernel, t Target, ns sysctl.Namespace, verb string) error {
	if !slices.Contains(enterable, ns) {
		return fmt.Errorf("cannot %s %s sysctls from the host", verb, ns)
	}
	ref, own := t[ns]
	if !own {
		return fmt.Errorf("pod has no %s namespace of its own", ns)
	}
	fd, where, err := openNamespace(k, ref, ns)
	if err != nil {
		return err
	}
	defer k.Close(fd)
	if err := checkFirstSeen(k, fd, ref, where, ns); err != nil {
		return err
	}
	if err := refuseHostOrOwn(k, fd, where, ns, verb); err != nil {
		return err
	}
	if err := k.Setns(fd, ns); err != nil {
		return fmt.Errorf("entering %s namespace %s: %w", ns, where, err)
	}
	return nil
}

// ErrSandboxExited marks a pid-based target whose process is gone: its pid
// may already be another pod's.
var ErrSandboxExited = errors.New("the pod sandbox process has exited")

// openNamespace opens the namespace ref names; where says which, for
// errors. A path is a bind mount that pins the namespace. A pid pins
// nothing, so it is held with a pidfd across the open of
// /proc/<pid>/ns/<kind>, and the process checked alive afterwards: the fd
// is then that process's namespace, even if the pid is reused later.
func openNamespace(k Kernel, ref NamespaceRef, ns sysctl.Namespace) (fd int, where string, err error) {
	if ref.Path != "" {
		fd, err := k.Open(ref.Path)
		if err != nil {
			return -1, ref.Path, fmt.Errorf("opening %s namespace %s: %w", ns, ref.Path, err)
		}
		return fd, ref.Path, nil
	}
	if ref.Pid <= 0 {
		return -1, "", fmt.Errorf("pod's %s namespace has neither a path nor a process", ns)
	}
	where = "/proc/" + strconv.Itoa(ref.Pid) + "/ns/" + ns.ProcName()
	pidfd := ref.Pidfd
	if pidfd <= 0 {
		if pidfd, err = k.PidfdOpen(ref.Pid); errors.Is(err, unix.ESRCH) {
			return -1, where, fmt.Errorf("%s namespace of pid %d: %w", ns, ref.Pid, ErrSandboxExited)
		} else if err != nil {
			return -1, where, fmt.Errorf("pidfd_open(%d): %w", ref.Pid, err)
		}
		defer k.Close(pidfd)
	}
	fd, err = k.Open(where)
	if err != nil {
		return -1, where, fmt.Errorf("opening %s namespace %s: %w", ns, where, err)
	}
	if err := stillThePods(k, ref); err != nil {
		k.Close(fd)
		return -1, where, fmt.Errorf("%s namespace of pid %d: %w", ns, ref.Pid, err)
	}
	// Checked after the opens: the pid was then still the process the
	// pidfd holds, so fd is that process's namespace.
	if err := k.PidfdAlive(pidfd); err != nil {
		k.Close(fd)
		return -1, where, fmt.Errorf("%s namespace of pid %d: %w (%w)", ns, ref.Pid, ErrSandboxExited, err)
	}
	return fd, where, nil
}

// stillThePods tells whether ref's process is still in the pod's network
// namespace (ref.NetPath), when that is known.
func stillThePods(k Kernel, ref NamespaceRef) error {
	if ref.NetPath == "" {
		return nil
	}
	pod, err := k.Stat(ref.NetPath)
	if err != nil {
		return fmt.Errorf("%w: its network namespace %s: %w", ErrSandboxExited, ref.NetPath, err)
	}
	procNet := "/proc/" + strconv.Itoa(ref.Pid) + "/ns/net"
	now, err := k.Stat(procNet)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrSandboxExited, procNet, err)
	}
	if pod != now {
		return fmt.Errorf("%w: pid %d is no longer in the pod's network namespace %s (the pid names another process now)", ErrSandboxExited, ref.Pid, ref.NetPath)
	}
	return nil
}

// ErrNotPodNamespace marks a target that is the host's namespace or the
// plugin's own: writing there would change the node, and reading there
// would judge the node's values as the pod's.
var ErrNotPodNamespace = errors.New("not the pod's namespace")

// refuseHostOrOwn is a last guard against writing into the host: the
// namespace open at fd must be neither the host's nor the plugin's own,
// which differ when the plugin runs in a container. The host's is pid 1's
// and, where pid 1 is out of reach, the kernel's fixed number for the
// initial namespace.
func refuseHostOrOwn(k Kernel, fd int, where string, ns sysctl.Namespace, verb string) error {
	target, err := k.Fstat(fd)
	if err != nil {
		return fmt.Errorf("%s namespace %s: %w", ns, where, err)
	}
	ownPath := "/proc/self/ns/" + ns.ProcName()
	own, err := k.Stat(ownPath)
	if err != nil {
		return fmt.Errorf("reading %s: %w", ownPath, err)
	}
	hostByNumber := target.Dev == own.Dev && target.Ino == ns.InitialInode()
	if hostByNumber || sameAs(k, target, "/proc/1/ns/"+ns.ProcName()) {
		return fmt.Errorf("refusing to %s, %w: %s is the host's %s namespace", verb, ErrNotPodNamespace, where, ns)
	}
	if target == own {
		return fmt.Errorf("refusing to %s, %w: %s is the plugin's own %s namespace", verb, ErrNotPodNamespace, where, ns)
	}
	return nil
}

// sameAs tells whether id is the file at path. A path that cannot be read
// matches nothing.
func sameAs(k Kernel, id NamespaceID, path string) bool {
	other, err := k.Stat(path)
	return err == nil && id == other
}
