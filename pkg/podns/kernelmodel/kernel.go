// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package kernelmodel is a kernel's side as data, for tests that run
// podns's guards against sequences a node cannot be made to replay:
// processes by pid (a pid given to another process the moment its own
// exits), namespaces and the values of their keys, bind mounts, fds and
// the namespaces of the one thread a visit runs on. It answers podns.Kernel
// as Linux does for the calls podns makes, errno for errno where podns
// tells them apart.
package kernelmodel

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

// nsfsDev is the device every namespace's file is on, as nsfs's on Linux.
const nsfsDev = 4

// Namespace is one namespace: its kind, identity, who it belongs to (for
// the test's checks) and its keys' values.
type Namespace struct {
	Kind   sysctl.Namespace
	ID     podns.NamespaceID
	Owner  string
	Values map[string]string
}

// Process is a process: its pid, cgroup (a /proc/<pid>/cgroup text) and
// namespaces, one of each kind.
type Process struct {
	Pid    int
	Cgroup string
	NS     map[sysctl.Namespace]*Namespace
	exited bool
}

// fdEntry is what an fd holds: a process (a pidfd) or a namespace.
type fdEntry struct {
	proc *Process
	ns   *Namespace
}

// Kernel is the data; Host is its podns.Kernel. Safe for concurrent use:
// mu guards the data, and visits (OnThread) run one at a time under
// threadMu, taken before mu.
type Kernel struct {
	threadMu sync.Mutex
	mu       sync.Mutex
	host     map[sysctl.Namespace]*Namespace
	procs    map[int]*Process
	mounts   map[string]*Namespace
	fds      map[int]fdEntry
	nextFD   int
	nextIno  uint64
	nextPid  int
	// thread is the namespaces of the visit's thread, nil outside one.
	thread map[sysctl.Namespace]*Namespace
	// onWrite sees every write through ProcSys, before it is made.
	onWrite func(ns *Namespace, key, value string)
	// faults are misuses no kernel forgives (an fd closed twice, a setns
	// outside a visit's thread).
	faults []string
}

// NewKernel is a kernel whose host namespaces (pid 1's, and the caller's
// own) hold hostValues, by key, for their kinds.
func NewKernel(hostValues map[string]string) *Kernel {
	k := &Kernel{
		host:    map[sysctl.Namespace]*Namespace{},
		procs:   map[int]*Process{},
		mounts:  map[string]*Namespace{},
		fds:     map[int]fdEntry{},
		nextFD:  3,
		nextIno: 0xf0000000,
		nextPid: 100,
	}
	for _, kind := range []sysctl.Namespace{sysctl.Net, sysctl.IPC, sysctl.UTS} {
		k.host[kind] = &Namespace{Kind: kind, ID: podns.NamespaceID{Dev: nsfsDev, Ino: kind.InitialInode()}, Owner: "host", Values: valuesOf(kind, hostValues)}
	}
	k.procs[1] = &Process{Pid: 1, Cgroup: "0::/init.scope\n", NS: maps.Clone(k.host)}
	return k
}

func valuesOf(kind sysctl.Namespace, values map[string]string) map[string]string {
	out := map[string]string{}
	for key, v := range values {
		if sysctl.NamespaceOf(key) == kind {
			out[key] = v
		}
	}
	return out
}

// Host is the host's namespace of kind.
func (k *Kernel) Host(kind sysctl.Namespace) *Namespace { return k.host[kind] }

// OnWrite makes f see every write through ProcSys, under the kernel's
// lock: f must not call the kernel.
func (k *Kernel) OnWrite(f func(ns *Namespace, key, value string)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.onWrite = f
}

// Faults is the misuses seen so far.
func (k *Kernel) Faults() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.faults)
}

// OpenFDs is how many fds are open.
func (k *Kernel) OpenFDs() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.fds)
}

// NewNamespace makes a namespace of kind owned by owner, holding values
// (by key, those of its kind).
func (k *Kernel) NewNamespace(kind sysctl.Namespace, owner string, values map[string]string) *Namespace {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.nextIno++
	return &Namespace{Kind: kind, ID: podns.NamespaceID{Dev: nsfsDev, Ino: k.nextIno}, Owner: owner, Values: valuesOf(kind, values)}
}

// Spawn starts a process in cgroup with namespaces ns (the host's for a
// kind it lacks), at pid when above 0 (a pid free now), else at the next
// free pid.
func (k *Kernel) Spawn(pid int, cgroup string, ns map[sysctl.Namespace]*Namespace) *Process {
	k.mu.Lock()
	defer k.mu.Unlock()
	if pid <= 0 {
		for k.procs[k.nextPid] != nil {
			k.nextPid++
		}
		pid = k.nextPid
		k.nextPid++
	}
	if k.procs[pid] != nil {
		panic(fmt.Sprintf("kernelmodel: pid %d is taken", pid))
	}
	all := maps.Clone(k.host)
	maps.Copy(all, ns)
	p := &Process{Pid: pid, Cgroup: cgroup, NS: all}
	k.procs[pid] = p
	return p
}

// Exit ends p: its pid is free for another process at once; pidfds of it
// see it exited.
func (k *Kernel) Exit(p *Process) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p.exited = true
	if k.procs[p.Pid] == p {
		delete(k.procs, p.Pid)
	}
}

// Free tells whether no process has pid.
func (k *Kernel) Free(pid int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.procs[pid] == nil
}

// Mount bind-mounts ns at path (a pod's network namespace); nil unmounts.
func (k *Kernel) Mount(path string, ns *Namespace) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if ns == nil {
		delete(k.mounts, path)
		return
	}
	k.mounts[path] = ns
}

// Set sets key in ns, as a process inside it would (no OnWrite).
func (k *Kernel) Set(ns *Namespace, key, value string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ns.Values[key] = value
}

// Get is key's value in ns.
func (k *Kernel) Get(ns *Namespace, key string) (string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	v, ok := ns.Values[key]
	return v, ok
}

// Kernel is k as podns reaches it.
func (k *Kernel) Kernel() podns.Kernel { return kernel{k} }

type kernel struct{ k *Kernel }

var _ podns.Kernel = kernel{}

func (f kernel) newFD(e fdEntry) int {
	fd := f.k.nextFD
	f.k.nextFD++
	f.k.fds[fd] = e
	return fd
}

func (f kernel) PidfdOpen(pid int) (int, error) {
	f.k.mu.Lock()
	defer f.k.mu.Unlock()
	p := f.k.procs[pid]
	if p == nil {
		return -1, unix.ESRCH
	}
	return f.newFD(fdEntry{proc: p}), nil
}

func (f kernel) PidfdAlive(pidfd int) error {
	f.k.mu.Lock()
	defer f.k.mu.Unlock()
	e, ok := f.k.fds[pidfd]
	switch {
	case !ok || e.proc == nil:
		return unix.EBADF
	case e.proc.exited:
		return unix.ESRCH
	}
	return nil
}

func (f kernel) Dup(fd int) (int, error) {
	f.k.mu.Lock()
	defer f.k.mu.Unlock()
	e, ok := f.k.fds[fd]
	if !ok {
		return -1, unix.EBADF
	}
	return f.newFD(e), nil
}

func (f kernel) Close(fd int) {
	f.k.mu.Lock()
	defer f.k.mu.Unlock()
	if _, ok := f.k.fds[fd]; !ok {
		f.k.faults = append(f.k.faults, fmt.Sprintf("closed fd %d, which was not open", fd))
		return
	}
	delete(f.k.fds, fd)
}

// resolve is the namespace path names: a mount, or /proc/<pid|self>/ns/<kind>.
func (f kernel) resolve(path string) (*Namespace, error) {
	if ns, ok := f.k.mounts[path]; ok {
		return ns, nil
	}
	rest, ok := strings.CutPrefix(path, "/proc/")
	if !ok {
		return nil, os.ErrNotExist
	}
	who, name, ok := strings.Cut(rest, "/ns/")
	if !ok {
		return nil, os.ErrNotExist
	}
	var p *Process
	if who == "self" {
		p = &Process{NS: f.k.host} // the plugin runs in the host's namespaces
	} else if pid, err := strconv.Atoi(who); err == nil {
		p = f.k.procs[pid]
	}
	if p == nil {
		return nil, unix.ENOENT
	}
	for kind, ns := range p.NS {
		if kind.ProcName() == name {
			return ns, nil
		}
	}
	return nil, unix.ENOENT
}

func (f kernel) Open(path string) (int, error) {
	f.k.mu.Lock()
	defer f.k.mu.Unlock()
	ns, err := f.resolve(path)
	if err != nil {
		return -1, err
	}
	return f.newFD(fdEntry{ns: ns}), nil
}

func (f kernel) Fstat(fd int) (podns.NamespaceID, error) {
	f.k.mu.Lock()
	defer f.k.mu.Unlock()
	e, ok := f.k.fds[fd]
	switch {
	case !ok:
		return podns.NamespaceID{}, unix.EBADF
	case e.ns == nil:
		return podns.NamespaceID{Dev: 14, Ino: uint64(fd)}, nil // anon_inode
	}
	return e.ns.ID, nil
}

func (f kernel) Stat(path string) (podns.NamespaceID, error) {
	f.k.mu.Lock()
	defer f.k.mu.Unlock()
	ns, err := f.resolve(path)
	if err != nil {
		return podns.NamespaceID{}, err
	}
	return ns.ID, nil
}

func (f kernel) Setns(fd int, kind sysctl.Namespace) error {
	f.k.mu.Lock()
	defer f.k.mu.Unlock()
	e, ok := f.k.fds[fd]
	switch {
	case f.k.thread == nil:
		f.k.faults = append(f.k.faults, "setns outside a thread of its own")
		return unix.EPERM
	case !ok:
		return unix.EBADF
	case e.ns == nil || e.ns.Kind != kind:
		return unix.EINVAL
	}
	f.k.thread[kind] = e.ns
	return nil
}

func (f kernel) ReadFile(path string) ([]byte, error) {
	f.k.mu.Lock()
	defer f.k.mu.Unlock()
	who, ok := strings.CutSuffix(strings.TrimPrefix(path, "/proc/"), "/cgroup")
	pid, err := strconv.Atoi(who)
	if !ok || err != nil || f.k.procs[pid] == nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: unix.ENOENT}
	}
	return []byte(f.k.procs[pid].Cgroup), nil
}

// OnThread runs fn as on a new thread of the plugin: in the host's
// namespaces until it enters others, one visit at a time.
func (f kernel) OnThread(fn func()) {
	f.k.threadMu.Lock()
	defer f.k.threadMu.Unlock()
	f.k.mu.Lock()
	f.k.thread = maps.Clone(f.k.host)
	f.k.mu.Unlock()
	defer func() {
		f.k.mu.Lock()
		f.k.thread = nil
		f.k.mu.Unlock()
	}()
	fn()
}

func (f kernel) ProcSys() podns.ProcSys { return procSys(f) }

// procSys reads and writes keys in the namespaces the visit's thread is
// in.
type procSys struct{ k *Kernel }

var errNoThread = errors.New("kernelmodel: /proc/sys used outside a visit's thread")

func (p procSys) Writable() error { return nil }

func (p procSys) namespaceOf(key string) (*Namespace, error) {
	if p.k.thread == nil {
		p.k.faults = append(p.k.faults, errNoThread.Error())
		return nil, errNoThread
	}
	ns := p.k.thread[sysctl.NamespaceOf(key)]
	if ns == nil {
		return nil, &os.PathError{Op: "open", Path: sysctl.Path(key), Err: unix.ENOENT}
	}
	return ns, nil
}

func (p procSys) Read(key string) ([]byte, error) {
	p.k.mu.Lock()
	defer p.k.mu.Unlock()
	ns, err := p.namespaceOf(key)
	if err != nil {
		return nil, err
	}
	v, ok := ns.Values[key]
	if !ok {
		return nil, &os.PathError{Op: "open", Path: sysctl.Path(key), Err: unix.ENOENT}
	}
	return []byte(v + "\n"), nil
}

func (p procSys) Write(key, value string) error {
	p.k.mu.Lock()
	defer p.k.mu.Unlock()
	ns, err := p.namespaceOf(key)
	if err != nil {
		return err
	}
	if _, ok := ns.Values[key]; !ok {
		return &os.PathError{Op: "open", Path: sysctl.Path(key), Err: unix.ENOENT}
	}
	if p.k.onWrite != nil {
		p.k.onWrite(ns, key, value)
	}
	ns.Values[key] = value
	return nil
}

func (p procSys) Close() {}
