// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// IDMapping is one line of a user namespace's gid_map.
type IDMapping struct {
	ContainerID uint32
	HostID      uint32
	Size        uint32
}

// clampPingGroupRange narrows "lo hi" to the container-side GIDs the
// mappings cover. ok is false when nothing is left or the value cannot be
// read, with the reason.
func clampPingGroupRange(value string, mappings []IDMapping) (clamped string, ok bool, reason string) {
	if len(mappings) == 0 {
		return "", false, "pod has its own user namespace but its gid mapping is unknown, so the range cannot be clamped"
	}
	fields := strings.Fields(value)
	if len(fields) != 2 {
		return "", false, fmt.Sprintf("value %q is not \"low high\"", value)
	}
	lo, err1 := strconv.ParseUint(fields[0], 10, 32)
	hi, err2 := strconv.ParseUint(fields[1], 10, 32)
	if err1 != nil || err2 != nil {
		return "", false, fmt.Sprintf("value %q is not two GIDs", value)
	}
	minGID, maxGID := uint64(1<<32-1), uint64(0)
	for _, m := range mappings {
		if m.Size == 0 {
			continue
		}
		minGID = min(minGID, uint64(m.ContainerID))
		maxGID = max(maxGID, uint64(m.ContainerID)+uint64(m.Size)-1)
	}
	lo, hi = max(lo, minGID), min(hi, maxGID)
	if lo > hi {
		return "", false, fmt.Sprintf("range %q has no GID mapped in the pod's user namespace", value)
	}
	return fmt.Sprintf("%d %d", lo, hi), true, ""
}

// HostSide is s as a writer or reader in the host's user namespace (the
// plugin in namespace mode, audit --read) sees it: the kernel reads
// ping_group_range's GIDs in that namespace, so in a pod with its own user
// namespace the container-side GIDs become host GIDs. Every other key, and
// every key of a pod without a user namespace, is as it is.
func HostSide(s sysctl.Sysctl, own NamespaceSet, gids []IDMapping) (sysctl.Sysctl, error) {
	if s.Key() != sysctl.PingGroupRange || !own.Has(sysctl.User) {
		return s, nil
	}
	host, err := HostPingGroupRange(s.Value(), gids)
	if err != nil {
		return s, err
	}
	return sysctl.New(s.Key(), host), nil
}

// HostPingGroupRange turns a container-side "lo hi" into host GIDs, for a
// writer in the host's user namespace (namespace mode): the kernel reads
// the GIDs in the writer's namespace. A range that crosses into another
// mapping is cut at the end of the mapping that holds lo.
func HostPingGroupRange(value string, mappings []IDMapping) (string, error) {
	fields := strings.Fields(value)
	if len(fields) != 2 {
		return "", fmt.Errorf("value %q is not \"low high\"", value)
	}
	lo, err1 := strconv.ParseUint(fields[0], 10, 32)
	hi, err2 := strconv.ParseUint(fields[1], 10, 32)
	if err1 != nil || err2 != nil || lo > hi {
		return "", fmt.Errorf("value %q is not a GID range", value)
	}
	for _, m := range mappings {
		first, last := uint64(m.ContainerID), uint64(m.ContainerID)+uint64(m.Size)-1
		if m.Size == 0 || lo < first || lo > last {
			continue
		}
		hi = min(hi, last)
		offset := uint64(m.HostID) - first
		return fmt.Sprintf("%d %d", lo+offset, hi+offset), nil
	}
	return "", fmt.Errorf("GID %d is not mapped in the pod's user namespace", lo)
}

// UserNamespaceValues lists, for each writer, the values cfg gives a pod
// with its own user namespace whose GIDs are gids, as that writer writes
// them: ping_group_range clamped to the pod's GIDs, and in host GIDs for
// host root, as Decide and the namespace-mode writer do. The user
// namespace probe writes them, so that a value the kernel takes from host
// root in a fresh namespace but refuses there is known before any pod has
// it.
func UserNamespaceValues(cfg *config.Config, gids []IDMapping) map[sysctl.Writer]map[string][]string {
	out := map[sysctl.Writer]map[string][]string{sysctl.WriterInPod: {}, sysctl.WriterHost: {}}
	eachEntry(cfg, func(_ string, e config.Entry) {
		for w, v := range writtenInUserNamespace(e, gids) {
			if !slices.Contains(out[w][e.Key], v) {
				out[w][e.Key] = append(out[w][e.Key], v)
			}
		}
	})
	return out
}

// UserNamespaceProblems judges what the user namespace probe found for the
// values UserNamespaceValues gave it: a value a writer cannot set a key
// to, where that writer can set the key, rejects the config like any
// other refused value. Keys a writer cannot set at all are left out for
// such pods (userNamespaceRefused), not judged here.
func UserNamespaceProblems(cfg *config.Config, gids []IDMapping, refused map[sysctl.Writer]map[string]error, stored map[sysctl.Writer]map[string]map[string]sysctl.Stored) config.Problems {
	var problems config.Problems
	eachEntry(cfg, func(where string, e config.Entry) {
		for _, w := range []sysctl.Writer{sysctl.WriterInPod, sysctl.WriterHost} {
			v, ok := writtenInUserNamespace(e, gids)[w]
			if _, keyRefused := refused[w][e.Key]; !ok || keyRefused {
				continue
			}
			s, probed := stored[w][e.Key][v]
			if !probed {
				continue
			}
			if _, err := sysctl.Judge(v, s); err != nil {
				problems = append(problems, config.Problem{File: cfg.Source, Line: e.Line, Key: where + e.Key,
					Reason: fmt.Sprintf("in a pod with its own user namespace, %s (when %s writes it)", err, w)})
			}
		}
	})
	return problems
}

// writtenInUserNamespace is what each writer writes for e into a pod with
// its own user namespace; a writer is missing when the pod would not get
// the key (a range with no GID mapped).
func writtenInUserNamespace(e config.Entry, gids []IDMapping) map[sysctl.Writer]string {
	if e.Key != sysctl.PingGroupRange {
		return map[sysctl.Writer]string{sysctl.WriterInPod: e.Value, sysctl.WriterHost: e.Value}
	}
	clamped, ok, _ := clampPingGroupRange(e.Value, gids)
	if !ok {
		return nil
	}
	out := map[sysctl.Writer]string{sysctl.WriterInPod: clamped}
	if host, err := HostPingGroupRange(clamped, gids); err == nil {
		out[sysctl.WriterHost] = host
	}
	return out
}

// eachEntry calls fn for every entry of cfg, defaults, rules then
// profiles, with the place it has in the file ("sysctls.",
// "rules[0].sysctls.", "profiles.low-latency.sysctls.").
func eachEntry(cfg *config.Config, fn func(where string, e config.Entry)) {
	for _, e := range cfg.Sysctls {
		if e.Source == config.SourceHost {
			fn("", e) // at its inheritFromHost line
			continue
		}
		fn("sysctls.", e)
	}
	for i, r := range cfg.Rules {
		for _, e := range r.Sysctls {
			fn(fmt.Sprintf("rules[%d].sysctls.", i), e)
		}
	}
	for _, pr := range cfg.Profiles {
		for _, e := range pr.Sysctls {
			fn("profiles."+pr.Name+".sysctls.", e)
		}
	}
}
