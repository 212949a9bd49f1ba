// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package kernelmodel

import (
	"errors"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

const msgmax = "kernel.msgmax"

// TestHeldPodAfterItsPidIsReused: podns on this kernel behaves as on
// Linux (pkg/podns's own tests, with real processes): a pod held writes
// into its own namespace; once its process exits and the pid names
// another, nothing is written anywhere and the error says the sandbox
// exited; a fresh hold of that pid is refused by the cgroup check.
func TestHeldPodAfterItsPidIsReused(t *testing.T) {
	k := NewKernel(map[string]string{msgmax: "8192"})
	host := podns.On(k.Kernel())
	podIPC := k.NewNamespace(sysctl.IPC, "pod", map[string]string{msgmax: "8192"})
	sandbox := k.Spawn(0, "0::/kubepods/pod1/sb1\n", map[sysctl.Namespace]*Namespace{sysctl.IPC: podIPC})
	target := podns.Target{sysctl.IPC: {Pid: sandbox.Pid}}
	owner := host.InSandboxCgroup("sb1", "")

	held, err := host.Hold(target, sandbox.Pid, owner)
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	visit := func() []podns.WriteError {
		heldTarget, release, err := held.Target()
		if err != nil {
			t.Fatalf("Target: %v", err)
		}
		defer release()
		return host.Write(heldTarget, []sysctl.Sysctl{sysctl.New(msgmax, "16384")})
	}
	if errs := visit(); len(errs) > 0 {
		t.Fatalf("Write into the held pod: %v", errs)
	}
	if v, _ := k.Get(podIPC, msgmax); v != "16384" {
		t.Fatalf("pod's %s = %s, want 16384", msgmax, v)
	}

	k.Exit(sandbox)
	otherIPC := k.NewNamespace(sysctl.IPC, "other", map[string]string{msgmax: "8192"})
	k.Spawn(sandbox.Pid, "0::/system.slice/other.service\n", map[sysctl.Namespace]*Namespace{sysctl.IPC: otherIPC})
	errs := visit()
	if len(errs) != 1 || !errors.Is(errs[0].Err, podns.ErrSandboxExited) {
		t.Fatalf("Write after the pid was reused: %v, want one %v", errs, podns.ErrSandboxExited)
	}
	for _, ns := range []*Namespace{otherIPC, k.Host(sysctl.IPC)} {
		if v, _ := k.Get(ns, msgmax); v != "8192" {
			t.Errorf("%s's %s = %s, want 8192 untouched", ns.Owner, msgmax, v)
		}
	}
	if _, err := host.Hold(target, sandbox.Pid, owner); err == nil {
		t.Error("Hold of the reused pid: no error, want the cgroup check's")
	}
	held.Close()
	if open := k.OpenFDs(); open != 0 {
		t.Errorf("%d fds open after Close, want 0", open)
	}
	if faults := k.Faults(); len(faults) > 0 {
		t.Errorf("faults: %v", faults)
	}
}
