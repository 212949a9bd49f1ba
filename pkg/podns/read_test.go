// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podns

import (
	"errors"
	"os"
	"strconv"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

// Read enters the pod's namespace as Write does: it reads the value the
// pod has, and refuses the host's namespace and a user namespace.
func TestReadInPodNetns(t *testing.T) {
	path := newNetns(t)
	const key = "net.ipv4.tcp_keepalive_time"
	want := markerFor(t, key)
	if errs := Write(Target{sysctl.Net: {Path: path}}, []sysctl.Sysctl{sysctl.New(key, want)}); len(errs) != 0 {
		t.Fatalf("Write: %v", errs)
	}
	got := Read(Target{sysctl.Net: {Path: path}}, []string{key, "user.max_user_namespaces"})
	if v := got[key]; v.Err != nil || v.Value != want {
		t.Errorf("Read %s = %+v, want %s", key, v, want)
	}
	if v := got["user.max_user_namespaces"]; v.Err == nil {
		t.Errorf("a user namespace key was read from the host: %+v", v)
	}
	self := Read(PidTarget(Process{Pid: os.Getpid()}, func(ns sysctl.Namespace) bool { return ns == sysctl.Net }), []string{key, "kernel.msgmax"})
	if err := self[key].Err; !errors.Is(err, ErrNotPodNamespace) {
		t.Errorf("reading through the plugin's own pid: %v, want the plugin's own namespace refused", err)
	}
	if self["kernel.msgmax"].Err == nil {
		t.Errorf("a namespace the pod does not own was read: %+v", self["kernel.msgmax"])
	}
}

// Visit reads the pod's values, hands them to decide on the thread it
// entered the pod's namespaces with, and writes what decide returns
// there: the pod changes, the host does not. A decide that returns
// nothing writes nothing.
func TestVisitReadsDecidesAndWritesInThePod(t *testing.T) {
	forEachProcSys(t, visitReadsDecidesAndWritesInThePod)
}

func visitReadsDecidesAndWritesInThePod(t *testing.T) {
	pod := startPodProcess(t)
	pid := pod.Process.Pid
	pidfd, err := OpenPidfd(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	target := PidTarget(Process{Pid: pid, Pidfd: pidfd}, owningAll)
	const netKey, ipcKey = "net.ipv4.tcp_keepalive_time", "kernel.msgmax"
	hostNet, hostIPC := hostValue(t, netKey), hostValue(t, ipcKey)
	netMarker, ipcMarker := markerFor(t, netKey), markerFor(t, ipcKey)
	var podNet unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/net", &podNet); err != nil {
		t.Fatal(err)
	}

	var seen map[string]Value
	var decidedInPod bool
	errs := Visit(target, []string{netKey, ipcKey, "user.max_user_namespaces"}, func(read map[string]Value) []sysctl.Sysctl {
		seen = read
		var here unix.Stat_t
		decidedInPod = unix.Stat("/proc/thread-self/ns/net", &here) == nil && here.Ino == podNet.Ino && here.Dev == podNet.Dev
		return []sysctl.Sysctl{sysctl.New(netKey, netMarker), sysctl.New(ipcKey, ipcMarker)}
	})
	checkHostHasNot(t, netKey, netMarker, hostNet)
	checkHostHasNot(t, ipcKey, ipcMarker, hostIPC)
	if len(errs) != 0 {
		t.Fatalf("Visit: %v", errs)
	}
	// A fresh namespace's values, as the pod had them before the write.
	if v := seen[netKey]; v.Err != nil || v.Value != "7200" {
		t.Errorf("decide saw %s %+v, want 7200", netKey, v)
	}
	if v := seen[ipcKey]; v.Err != nil || v.Value != "8192" {
		t.Errorf("decide saw %s %+v, want 8192", ipcKey, v)
	}
	if seen["user.max_user_namespaces"].Err == nil {
		t.Errorf("a user namespace key was read from the host: %+v", seen["user.max_user_namespaces"])
	}
	if !decidedInPod {
		t.Error("decide did not run in the pod's network namespace")
	}
	if got := readIPC(t, pid, ipcKey); got != ipcMarker {
		t.Errorf("%s in the pod = %s, want %s", ipcKey, got, ipcMarker)
	}
	after := Read(target, []string{netKey})[netKey]
	if after.Err != nil || after.Value != netMarker {
		t.Errorf("%s in the pod = %+v, want %s", netKey, after, netMarker)
	}

	if errs := Visit(target, []string{netKey}, func(map[string]Value) []sysctl.Sysctl { return nil }); len(errs) != 0 {
		t.Fatalf("Visit writing nothing: %v", errs)
	}
	if got := Read(target, []string{netKey})[netKey]; got.Value != netMarker {
		t.Errorf("after a visit that wrote nothing, %s = %+v, want %s", netKey, got, netMarker)
	}
}
