// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"maps"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/converge"
)

const (
	reservedPorts = "net.ipv4.ip_local_reserved_ports"
	firstList     = "30000-30010,31000"
	nextList      = "30000-30020,31000"
)

func reservedPortsConfig(mode, list string) string {
	return "mode: " + mode + "\nsysctls:\n  " + reservedPorts + ": \"" + list + "\"\n"
}

// A list value the plugin set at a pod's creation is known as its own
// after a restart, in both modes: the restarted plugin converges the pod
// to a new list instead of leaving the old one to "another writer". It
// knows from the pod's state (the container then carries no annotation,
// so only the state can tell), or, for a pod from before that state
// existed, from the container's annotation read whole.
func TestListSetAtCreationConvergesAfterARestart(t *testing.T) {
	for _, mode := range []string{"spec", "namespace"} {
		for _, from := range []string{"state", "annotation"} {
			t.Run(mode+" from the "+from, func(t *testing.T) {
				restartOnANewList(t, mode, from == "state")
			})
		}
	}
}

func restartOnANewList(t *testing.T, mode string, fromState bool) {
	dir := t.TempDir()
	ctx := context.Background()
	first, ns := newConvergeTest(t, reservedPortsConfig(mode, firstList), dir, nil)
	ns.set(reservedPorts, "")
	pod := runningPod("list-"+mode, "network", "ipc", "uts")
	if err := first.RunPodSandbox(ctx, pod); err != nil {
		t.Fatal(err)
	}
	adj, _, err := first.CreateContainer(ctx, pod, &api.Container{Id: "c", PodSandboxId: pod.Id, Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if mode == "spec" {
		// runc writes the spec's sysctls as it creates the container.
		v, ok := adj.GetLinux().GetSysctl()[reservedPorts]
		if !ok {
			t.Fatalf("no %s on the spec: %v", reservedPorts, adj)
		}
		ns.set(reservedPorts, v)
	}
	if got := ns.get(reservedPorts); got != firstList {
		t.Fatalf("at creation: %s = %q, want %q", reservedPorts, got, firstList)
	}
	ctr := &api.Container{Id: "c", PodSandboxId: pod.Id}
	if fromState {
		first.keepSetPods() // the worker, off the create path
	} else {
		ctr.Annotations = adj.GetAnnotations()
		dir = t.TempDir() // a plugin from before the state at creation
	}
	ns.takeWrites()

	restarted, _ := newConvergeTest(t, reservedPortsConfig(mode, nextList), dir, nil)
	restarted.readNamespaces, restarted.writeNamespaces = ns.read, ns.write
	if _, err := restarted.Synchronize(ctx, []*api.PodSandbox{pod}, []*api.Container{ctr}); err != nil {
		t.Fatal(err)
	}
	passWrites(t, restarted, ns)("a pass after the restart on a new list", reservedPorts+"="+nextList)
}

// A key whose value before the plugin's first write is empty (a fresh
// namespace's ip_local_reserved_ports) is kept in the pod's state with
// the others, and restored, after a restart, when the key leaves the
// config.
func TestEmptyValueBeforeIsKeptAndRestored(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	withList := reservedPortsConfig("spec", firstList) + "  net.ipv4.tcp_keepalive_time: 600\n"
	first, ns := newConvergeTest(t, withList, dir, nil)
	ns.set(reservedPorts, "")
	pod := synchronizedPod(t, first, "empty-before")
	passWrites(t, first, ns)("a pod running before the plugin", reservedPorts+"="+firstList+",net.ipv4.tcp_keepalive_time=600")
	state, err := first.podState.Load(pod.Id)
	if err != nil {
		t.Fatal(err)
	}
	if w := state[reservedPorts]; !w.HasBefore || w.Before != "" || w.Set != firstList {
		t.Fatalf("state of %s: %+v, want set %q, before empty", reservedPorts, w, firstList)
	}

	restarted, _ := newConvergeTest(t, "mode: spec\nsysctls:\n  net.ipv4.tcp_keepalive_time: 600\n", dir, nil)
	restarted.readNamespaces, restarted.writeNamespaces = ns.read, ns.write
	if _, err := restarted.Synchronize(ctx, []*api.PodSandbox{pod}, nil); err != nil {
		t.Fatal(err)
	}
	passWrites(t, restarted, ns)("the key out of the config after a restart", reservedPorts+"=")
	if got := ns.get(reservedPorts); got != "" {
		t.Errorf("%s = %q, want it back empty", reservedPorts, got)
	}
}

// Beside a pod's state the containers' annotation is not read: a key
// the plugin put back and forgot stays forgotten, so that when it
// returns to the config the plugin's first write decides it, not the
// annotation's stale value.
func TestPodStateWinsOverTheAnnotation(t *testing.T) {
	p, _ := newConvergeTest(t, testConfig, t.TempDir(), nil)
	pod := synchronizedPod(t, p, "both")
	kept := map[string]converge.Written{"net.ipv4.tcp_keepalive_intvl": {Set: "60", HasSet: true, Before: "75", HasBefore: true}}
	if err := p.podState.Save(pod.Id, kept); err != nil {
		t.Fatal(err)
	}
	injected := map[string]string{"net.ipv4.ip_unprivileged_port_start": "1024", "net.ipv4.tcp_keepalive_intvl": "30"}
	got, _, err := p.loadPodState(p.record(pod), injected)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, kept) {
		t.Errorf("memory = %+v, want the state's alone %+v", got, kept)
	}
}
