// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podns

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

// Value is a key's value in a pod's namespaces, or why it could not be read.
type Value struct {
	Value string
	Err   error
}

// Read reads each key inside the target namespaces from a throw-away OS
// thread (nsthread), entered as Write enters them: read-only, and no other
// goroutine ever runs there.
func (h Host) Read(t Target, keys []string) map[string]Value {
	var out map[string]Value
	h.k.OnThread(func() {
		ps := h.k.ProcSys()
		defer ps.Close()
		out = readEntered(newEntered(h.k, t, "read"), ps, keys)
	})
	return out
}

// Read is Linux.Read.
func Read(t Target, keys []string) map[string]Value { return Linux.Read(t, keys) }

// Visit reads keys in the target namespaces, asks decide what to write
// from what it read, and writes that, all from one throw-away OS thread
// that enters each namespace once: a running pod's convergence costs one
// thread and one entry per namespace, not two (a third of a pass's CPU
// was making threads, perf on a paravirtualized VM). The writes go to the
// namespaces the read entered. decide runs on that thread, inside the
// pod's namespaces: goroutines it starts run elsewhere, but a socket it
// opens is the pod's, so it must not open one (nor log through a hook
// that may), nor change the thread's namespaces. It returns one error per
// key that could not be written, as Write does.
func (h Host) Visit(t Target, keys []string, decide func(map[string]Value) []sysctl.Sysctl) []WriteError {
	var errs []WriteError
	h.k.OnThread(func() { errs = visitLocked(h.k, t, keys, decide) })
	return errs
}

// Visit is Linux.Visit.
func Visit(t Target, keys []string, decide func(map[string]Value) []sysctl.Sysctl) []WriteError {
	return Linux.Visit(t, keys, decide)
}

func visitLocked(k Kernel, t Target, keys []string, decide func(map[string]Value) []sysctl.Sysctl) []WriteError {
	ps := k.ProcSys()
	defer ps.Close()
	in := newEntered(k, t, "read")
	writes := decide(readEntered(in, ps, keys))
	if len(writes) == 0 {
		return nil
	}
	return writeEntered(in, ps, writes)
}

// readEntered reads each key through in and ps, on its locked thread.
func readEntered(in *entered, ps ProcSys, keys []string) map[string]Value {
	out := make(map[string]Value, len(keys))
	for _, k := range keys {
		if err := in.into(k); err != nil {
			out[k] = Value{Err: err}
			continue
		}
		data, err := ps.Read(k)
		out[k] = Value{Value: strings.TrimSpace(string(data)), Err: err}
	}
	return out
}

// Process is a process in a pod's namespaces, as a caller first saw it:
// its pid, a pidfd taken then (0 if none), and the pod's network
// namespace path, which the process must still be in ("" if the pod has
// none of its own, or it is not known).
type Process struct {
	Pid, Pidfd int
	NetPath    string
}

// OpenPidfd takes a pidfd for pid, to hold it from when it is first seen.
func (h Host) OpenPidfd(pid int) (int, error) {
	fd, err := h.k.PidfdOpen(pid)
	if errors.Is(err, unix.ESRCH) {
		return -1, fmt.Errorf("pid %d: %w", pid, ErrSandboxExited)
	}
	return fd, err
}

// OpenPidfd is Linux.OpenPidfd.
func OpenPidfd(pid int) (int, error) { return Linux.OpenPidfd(pid) }

// PidTarget reaches through process p each namespace the host can enter
// that owns says is the pod's own. The network namespace is reached by
// its path when it is known.
func PidTarget(p Process, owns func(sysctl.Namespace) bool) Target {
	t := Target{}
	for _, ns := range enterable {
		if owns(ns) {
			t[ns] = NamespaceRef{Pid: p.Pid}
		}
	}
	if _, ok := t[sysctl.Net]; ok && p.NetPath != "" {
		t[sysctl.Net] = NamespaceRef{Path: p.NetPath}
	}
	t.HeldBy(p)
	return t
}

// HeldBy makes t's namespaces reached through p's pid those of p as first
// seen: through its pidfd (when it has one), and only while it is still in
// the pod's network namespace p.NetPath.
func (t Target) HeldBy(p Process) {
	for ns, ref := range t {
		if ref.Path != "" || ref.Pid != p.Pid {
			continue
		}
		if p.Pidfd > 0 {
			ref.Pidfd = p.Pidfd
		}
		ref.NetPath = p.NetPath
		t[ns] = ref
	}
}
