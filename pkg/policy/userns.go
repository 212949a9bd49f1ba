package policy

import (
	"fmt"
	"strconv"
	"strings"

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
