// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package podsysctl finds a pod's own sysctls (securityContext.sysctls).
// NRI does not show them: containerd writes them only into the pod
// sandbox's spec, so they are looked up from containerd (the plugin keeps
// the result in its per-pod record).
package podsysctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// Sources of a pod's sysctls, from most to least exact.
const (
	// SourceSandboxConfig is the pod config as kubelet sent it, from the
	// sandbox store's CRI metadata: only the pod's own keys.
	SourceSandboxConfig = "sandbox config"
	// SourceRuntimeConfig is the config as containerd kept it after adding
	// its implicit keys (ip_unprivileged_port_start, ping_group_range);
	// those then count as the pod's own, so they are never overridden.
	SourceRuntimeConfig = "runtime-amended sandbox config"
	// SourceSandboxSpec is the sandbox's OCI spec, with implicit keys.
	SourceSandboxSpec = "sandbox spec"
)

// PodSysctls is what is known of a pod's own sysctls.
type PodSysctls struct {
	Own    map[string]string
	Source string
	// GIDMappings is the sandbox's user namespace gid mapping, when it
	// has one and its spec could be read.
	GIDMappings []policy.IDMapping
	// Runtime is what the runtime added to the sandbox's spec beside the
	// pod's own keys (containerd's ip_unprivileged_port_start and
	// ping_group_range), when Own came from the pod's config and the spec
	// could be read: values set at the pod's creation by no other writer.
	Runtime map[string]string
}

// RuntimeUnread tells that the runtime's own keys may exist but were not
// read with the pod's: its config came without a spec beside it
// (containerd 2.0 to 2.2). RuntimeAdder reads them.
func (s PodSysctls) RuntimeUnread() bool {
	return s.Source == SourceSandboxConfig && s.Runtime == nil
}

// RuntimeAdder reads what the runtime added to a pod's sandbox spec
// beside own, where Fetch could not (PodSysctls.RuntimeUnread).
type RuntimeAdder interface {
	RuntimeAdded(ctx context.Context, podID string, own map[string]string) (map[string]string, error)
}

// ErrNoRuntimeAdder: the lookup cannot read the runtime's own keys.
var ErrNoRuntimeAdder = errors.New("the pod lookup cannot read what the runtime set")

// RuntimeAdded asks f, if it can tell, what the runtime added to the
// pod's sandbox spec beside own.
func RuntimeAdded(ctx context.Context, f Fetcher, podID string, own map[string]string) (map[string]string, error) {
	if a, ok := f.(RuntimeAdder); ok {
		return a.RuntimeAdded(ctx, podID, own)
	}
	return nil, ErrNoRuntimeAdder
}

// Fetcher reads a pod's sysctls from the runtime.
type Fetcher interface {
	Fetch(ctx context.Context, podID string) (PodSysctls, error)
}

// criMetadata is the part of containerd's CRI sandbox metadata we read. It is
// stored as {"Version":"v1","Metadata":{...,"Config":<PodSandboxConfig>}}.
type criMetadata struct {
	Version  string
	Metadata struct {
		Config *struct {
			Linux *struct {
				Sysctls         map[string]string `json:"sysctls"`
				SecurityContext *struct {
					NamespaceOptions *struct {
						UsernsOptions *struct {
							GIDs []struct {
								HostID      uint32 `json:"host_id"`
								ContainerID uint32 `json:"container_id"`
								Length      uint32 `json:"length"`
							} `json:"gids"`
						} `json:"userns_options"`
					} `json:"namespace_options"`
				} `json:"security_context"`
			} `json:"linux"`
		}
	}
}

// sysctlsFromCRIMetadata reads linux.sysctls, and the user namespace's gid
// mapping if the pod asked for one, from CRI metadata JSON.
func sysctlsFromCRIMetadata(data []byte) (map[string]string, []policy.IDMapping, error) {
	var m criMetadata
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, nil, fmt.Errorf("decoding CRI sandbox metadata: %w", err)
	}
	if m.Version != "v1" {
		return nil, nil, fmt.Errorf("CRI sandbox metadata has unsupported version %q", m.Version)
	}
	if m.Metadata.Config == nil {
		return nil, nil, fmt.Errorf("CRI sandbox metadata has no pod config")
	}
	linux := m.Metadata.Config.Linux
	if linux == nil {
		return normalized(nil), nil, nil
	}
	var gids []policy.IDMapping
	if sc := linux.SecurityContext; sc != nil && sc.NamespaceOptions != nil && sc.NamespaceOptions.UsernsOptions != nil {
		for _, g := range sc.NamespaceOptions.UsernsOptions.GIDs {
			gids = append(gids, policy.IDMapping{ContainerID: g.ContainerID, HostID: g.HostID, Size: g.Length})
		}
	}
	return normalized(linux.Sysctls), gids, nil
}

// ociSpec is the part of an OCI spec we read.
type ociSpec struct {
	Linux *struct {
		Sysctl      map[string]string `json:"sysctl"`
		GIDMappings []struct {
			ContainerID uint32 `json:"containerID"`
			HostID      uint32 `json:"hostID"`
			Size        uint32 `json:"size"`
		} `json:"gidMappings"`
	} `json:"linux"`
}

// readSpec reads linux.sysctl and linux.gidMappings from an OCI spec in
// JSON, in one decoding.
func readSpec(data []byte) (map[string]string, []policy.IDMapping, error) {
	var spec ociSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, nil, fmt.Errorf("decoding sandbox spec: %w", err)
	}
	if spec.Linux == nil {
		return normalized(nil), nil, nil
	}
	var gids []policy.IDMapping
	for _, m := range spec.Linux.GIDMappings {
		gids = append(gids, policy.IDMapping{ContainerID: m.ContainerID, HostID: m.HostID, Size: m.Size})
	}
	return normalized(spec.Linux.Sysctl), gids, nil
}

// fromSpec takes everything from a sandbox spec; the runtime's implicit
// keys are in it, so they count as the pod's own.
func fromSpec(spec []byte) (PodSysctls, error) {
	own, gids, err := readSpec(spec)
	if err != nil {
		return PodSysctls{}, err
	}
	return PodSysctls{Own: own, Source: SourceSandboxSpec, GIDMappings: gids}, nil
}

// fromCRIMetadata takes the pod's sysctls from CRI metadata, and its gid
// mapping from the metadata or, failing that, from the spec beside it.
func fromCRIMetadata(meta, spec []byte, source string) (PodSysctls, error) {
	own, gids, err := sysctlsFromCRIMetadata(meta)
	if err != nil {
		return PodSysctls{}, err
	}
	r := PodSysctls{Own: own, Source: source, GIDMappings: gids}
	if len(spec) > 0 {
		inSpec, specGIDs, err := readSpec(spec)
		if err == nil {
			r.Runtime = addedByRuntime(inSpec, own)
		}
		if r.GIDMappings == nil {
			r.GIDMappings = specGIDs
		}
	}
	return r, nil
}

// addedByRuntime is what a sandbox's spec sets beside the pod's own keys:
// never nil, so that a spec read is told from one not read.
func addedByRuntime(inSpec, own map[string]string) map[string]string {
	added := map[string]string{}
	for k, v := range inSpec {
		if _, mine := own[k]; !mine {
			added[k] = v
		}
	}
	return added
}

func normalized(in map[string]string) map[string]string {
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[sysctl.Normalize(k)] = v
	}
	return out
}
