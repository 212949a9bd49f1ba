// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podns

import (
	"os"

	"github.com/nri-sysctl/nri-sysctl/pkg/nsthread"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

// Kernel is every call podns makes into the kernel to find, check and
// enter a pod's namespaces and to read and write its keys. Outside tests
// it is Linux's; the model test of convergence gives one of its own
// (processes, pids reused, namespaces and their values as data), so that
// every guard of this package runs against it as it runs on a node.
type Kernel interface {
	// PidfdOpen takes a pidfd for pid; unix.ESRCH if there is none.
	PidfdOpen(pid int) (int, error)
	// PidfdAlive is nil while the pidfd's process has not exited.
	PidfdAlive(pidfd int) error
	// Dup duplicates fd, close-on-exec.
	Dup(fd int) (int, error)
	Close(fd int)
	// Open opens a namespace's file (a bind mount, /proc/<pid>/ns/<kind>)
	// read-only.
	Open(path string) (int, error)
	// Fstat and Stat give a file's identity (a namespace's, for nsfs).
	Fstat(fd int) (NamespaceID, error)
	Stat(path string) (NamespaceID, error)
	// Setns moves the calling thread into the namespace open at fd.
	Setns(fd int, ns sysctl.Namespace) error
	// ReadFile reads a small file of /proc (a process's cgroup).
	ReadFile(path string) ([]byte, error)
	// OnThread runs fn on an OS thread of its own, thrown away after, so
	// that the namespaces fn enters are entered by nothing else.
	OnThread(fn func())
	// ProcSys opens the /proc/sys the calling thread reads and writes
	// keys through, in the namespaces it entered.
	ProcSys() ProcSys
}

// ProcSys is the /proc/sys of one visit (procSys, outside tests).
type ProcSys interface {
	// Writable makes sure a write can go through.
	Writable() error
	// Read returns key's value, with surrounding white space.
	Read(key string) ([]byte, error)
	// Write sets key to value; an error names the key's /proc/sys path.
	Write(key, value string) error
	Close()
}

// Host reaches pods' namespaces through one kernel. Linux is the node's.
type Host struct{ k Kernel }

// On is a Host that reaches namespaces through k.
func On(k Kernel) Host { return Host{k: k} }

// Linux reaches pods' namespaces through the node's kernel.
var Linux = On(linuxKernel{})

// linuxKernel is Kernel as the node's kernel answers it.
type linuxKernel struct{}

func (linuxKernel) PidfdOpen(pid int) (int, error) { return unix.PidfdOpen(pid, 0) }

func (linuxKernel) PidfdAlive(pidfd int) error { return unix.PidfdSendSignal(pidfd, 0, nil, 0) }

func (linuxKernel) Dup(fd int) (int, error) {
	return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
}

func (linuxKernel) Close(fd int) { unix.Close(fd) }

func (linuxKernel) Open(path string) (int, error) {
	return unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
}

func (linuxKernel) Fstat(fd int) (NamespaceID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return NamespaceID{}, err
	}
	return NamespaceID{Dev: st.Dev, Ino: st.Ino}, nil
}

func (linuxKernel) Stat(path string) (NamespaceID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return NamespaceID{}, err
	}
	return NamespaceID{Dev: st.Dev, Ino: st.Ino}, nil
}

func (linuxKernel) Setns(fd int, ns sysctl.Namespace) error { return unix.Setns(fd, ns.CloneFlag()) }

func (linuxKernel) ReadFile(path string) ([]byte, error) { return os.ReadFile(path) }

func (linuxKernel) OnThread(fn func()) { nsthread.Run(fn) }

func (linuxKernel) ProcSys() ProcSys { return openProcSys() }
