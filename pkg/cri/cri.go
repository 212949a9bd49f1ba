// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package cri lists the running containers of a node's ready pods through
// the runtime's CRI socket (containerd serves CRI on its own socket), with
// what a decision needs to know of each pod.
package cri

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Pod is one ready pod sandbox.
type Pod struct {
	ID, Namespace, Name string
	Labels              map[string]string
	// Annotations are the pod's: rules, exclude and profiles read them.
	Annotations    map[string]string
	RuntimeHandler string
	// Own is the namespaces the pod has to itself.
	Own policy.NamespaceSet
	// Pid is a process in the pod's namespaces: the sandbox's, or else
	// one of its running containers'; 0 if none is known.
	Pid uint32
	// NetNSPath is the path of the pod's own network namespace from the
	// sandbox's spec, or "" (a hostNetwork pod, or not shown): a process
	// reached through Pid must still be in it.
	NetNSPath string
}

// Container is one running container of a ready pod.
type Container struct {
	Pod      *Pod
	ID, Name string
	// Annotations are those of its OCI spec, where NRI plugins' are.
	Annotations map[string]string
}

// ListRunning lists the running containers of ready pods, sorted by pod
// namespace, pod name, container name and ID.
func ListRunning(ctx context.Context, address string) ([]Container, error) {
	conn, err := grpc.NewClient("unix://"+address, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(podsysctl.TrustedDialer(address, 0)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	sandboxes, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	}})
	if err != nil {
		return nil, fmt.Errorf("CRI ListPodSandbox: %w", err)
	}
	ctrs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})
	if err != nil {
		return nil, fmt.Errorf("CRI ListContainers: %w", err)
	}
	pods := map[string]*Pod{}
	for _, sb := range sandboxes.GetItems() {
		status, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.GetId(), Verbose: true})
		if err != nil {
			return nil, fmt.Errorf("CRI PodSandboxStatus %s: %w", sb.GetId(), err)
		}
		pod := &Pod{
			ID:             sb.GetId(),
			Namespace:      sb.GetMetadata().GetNamespace(),
			Name:           sb.GetMetadata().GetName(),
			Labels:         sb.GetLabels(),
			Annotations:    sb.GetAnnotations(),
			RuntimeHandler: sb.GetRuntimeHandler(),
			Own:            ownNamespaces(status.GetStatus().GetLinux().GetNamespaces().GetOptions()),
		}
		pod.Pid, pod.NetNSPath = verboseSandbox(status.GetInfo())
		if !pod.Own.Has(sysctl.Net) {
			pod.NetNSPath = ""
		}
		pods[sb.GetId()] = pod
	}
	var out []Container
	for _, c := range ctrs.GetContainers() {
		pod := pods[c.GetPodSandboxId()]
		if pod == nil {
			continue // its pod is not ready: stopping
		}
		status, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.GetId(), Verbose: true})
		if err != nil {
			return nil, fmt.Errorf("CRI ContainerStatus %s: %w", c.GetId(), err)
		}
		var info struct {
			Pid         uint32 `json:"pid"`
			RuntimeSpec struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"runtimeSpec"`
		}
		if err := json.Unmarshal([]byte(status.GetInfo()["info"]), &info); err != nil {
			return nil, fmt.Errorf("container %s: reading CRI's verbose info: %w", c.GetId(), err)
		}
		if pod.Pid == 0 {
			pod.Pid = info.Pid
		}
		out = append(out, Container{Pod: pod, ID: c.GetId(), Name: c.GetMetadata().GetName(), Annotations: info.RuntimeSpec.Annotations})
	}
	slices.SortFunc(out, func(a, b Container) int {
		return cmp.Or(cmp.Compare(a.Pod.Namespace, b.Pod.Namespace), cmp.Compare(a.Pod.Name, b.Pod.Name), cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// verboseSandbox is the sandbox's pid and network namespace path from
// CRI's verbose info (containerd).
func verboseSandbox(info map[string]string) (pid uint32, netPath string) {
	var v struct {
		Pid         uint32 `json:"pid"`
		RuntimeSpec struct {
			Linux struct {
				Namespaces []struct {
					Type string `json:"type"`
					Path string `json:"path"`
				} `json:"namespaces"`
			} `json:"linux"`
		} `json:"runtimeSpec"`
	}
	_ = json.Unmarshal([]byte(info["info"]), &v)
	for _, ns := range v.RuntimeSpec.Linux.Namespaces {
		if ns.Type == "network" {
			netPath = ns.Path
		}
	}
	return v.Pid, netPath
}

// ownNamespaces is the pod's namespaces as containerd makes them: a
// hostNetwork pod shares the host's UTS namespace too.
func ownNamespaces(o *runtimeapi.NamespaceOption) policy.NamespaceSet {
	var own []sysctl.Namespace
	if o.GetNetwork() != runtimeapi.NamespaceMode_NODE {
		own = append(own, sysctl.Net, sysctl.UTS)
	}
	if o.GetIpc() != runtimeapi.NamespaceMode_NODE {
		own = append(own, sysctl.IPC)
	}
	// POD is the zero value: a pod without user namespace options has
	// none of its own.
	if o.GetUsernsOptions() != nil && o.GetUsernsOptions().GetMode() == runtimeapi.NamespaceMode_POD {
		own = append(own, sysctl.User)
	}
	return policy.Owning(own...)
}
