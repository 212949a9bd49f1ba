// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podns

import (
	"errors"
	"os"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
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
