// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podns

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// NamespaceID is a namespace's identity: the device and inode of its nsfs
// file, the namespace's for as long as it exists.
type NamespaceID struct{ Dev, Ino uint64 }

// ErrNotHeld marks a pod the plugin holds no process of: stopped, removed,
// or never seen running.
var ErrNotHeld = errors.New("the pod's sandbox process is not held")

// Held is a pod's sandbox process as first seen, held by what cannot be
// reused: a pidfd taken then (a pid can name another process the moment
// the pod's exits), and the identity of each namespace reached then, which
// every later entry must find again. Close releases it; a Target taken
// before stays usable until its own release.
type Held struct {
	k      Kernel
	mu     sync.Mutex
	pidfd  int // -1 once closed
	target Target
}

// Hold takes pid as the sandbox process of the pod whose namespaces t
// names (NamespaceRef.Pid set to pid where reached through it), once owner
// says that pid is the pod's: a pid learnt from the runtime may already
// name another process. It records each namespace of t as found now.
func (h Host) Hold(t Target, pid int, owner func(pid int) error) (*Held, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("%w: the pod has no sandbox process", ErrSandboxExited)
	}
	pidfd, err := h.OpenPidfd(pid)
	if err != nil {
		return nil, err
	}
	held, err := holdOpen(h.k, t, pid, pidfd, owner)
	if err != nil {
		h.k.Close(pidfd)
		return nil, err
	}
	return &Held{k: h.k, pidfd: pidfd, target: held}, nil
}

// holdOpen is Hold's checks with the pidfd open: owner's, then each
// namespace's identity, then the process still alive, so that what was
// read of pid was read of the process the pidfd holds.
func holdOpen(k Kernel, t Target, pid, pidfd int, owner func(pid int) error) (Target, error) {
	if err := owner(pid); err != nil {
		return nil, fmt.Errorf("pid %d is not the pod's sandbox process: %w", pid, err)
	}
	held := maps.Clone(t)
	for ns, ref := range held {
		if ref.Path == "" && ref.Pid != pid {
			return nil, fmt.Errorf("%s namespace: reached through pid %d, not the sandbox's %d", ns, ref.Pid, pid)
		}
		if ref.Pid == pid {
			ref.Pidfd = pidfd
		}
		fd, where, err := openNamespace(k, ref, ns)
		if err != nil {
			return nil, err
		}
		id, err := k.Fstat(fd)
		k.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("%s namespace %s: %w", ns, where, err)
		}
		ref.ID = id
		held[ns] = ref
	}
	if err := k.PidfdAlive(pidfd); err != nil {
		return nil, fmt.Errorf("pid %d: %w (%w)", pid, ErrSandboxExited, err)
	}
	return held, nil
}

// Target is the pod's namespaces as first seen, its pid-based ones
// reached through a pidfd of the caller's own (a dup, closed by release),
// so that a Close meanwhile cannot close it under a visit.
func (h *Held) Target() (t Target, release func(), err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pidfd < 0 {
		return nil, nil, ErrNotHeld
	}
	dup, err := h.k.Dup(h.pidfd)
	if err != nil {
		return nil, nil, fmt.Errorf("duplicating the sandbox's pidfd: %w", err)
	}
	t = maps.Clone(h.target)
	for ns, ref := range t {
		if ref.Pidfd > 0 {
			ref.Pidfd = dup
			t[ns] = ref
		}
	}
	return t, func() { h.k.Close(dup) }, nil
}

// Close releases the process; Target fails from then on.
func (h *Held) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pidfd >= 0 {
		h.k.Close(h.pidfd)
		h.pidfd = -1
	}
}

// InSandboxCgroup is the check that a pid is a pod's sandbox process: it
// is in the sandbox's own cgroup, which the runtime names after the
// sandbox. cgroupsPath is the sandbox's as the runtime set it (a path, or
// systemd's "slice:prefix:name"); empty, the runtime's default, a cgroup
// named by the sandbox's ID. A process of another pod, another container
// or the host is in another cgroup.
func (h Host) InSandboxCgroup(sandboxID, cgroupsPath string) func(pid int) error {
	leaves := sandboxCgroupLeaves(sandboxID, cgroupsPath)
	return func(pid int) error {
		file := "/proc/" + strconv.Itoa(pid) + "/cgroup"
		data, err := h.k.ReadFile(file)
		if err != nil {
			return fmt.Errorf("reading its cgroup: %w", err)
		}
		return inCgroupNamed(string(data), leaves)
	}
}

// sandboxCgroupLeaves is the names the sandbox's own cgroup may have, as
// runc names it from cgroupsPath.
func sandboxCgroupLeaves(sandboxID, cgroupsPath string) []string {
	if cgroupsPath == "" {
		// runc's defaults: <id> (cgroupfs), runc-<id>.scope (systemd).
		return []string{sandboxID, "runc-" + sandboxID + ".scope"}
	}
	if parts := strings.Split(cgroupsPath, ":"); len(parts) == 3 {
		// systemd: a scope "prefix-name.scope", unless name is a slice.
		if strings.HasSuffix(parts[2], ".slice") {
			return []string{parts[2]}
		}
		return []string{parts[1] + "-" + parts[2] + ".scope"}
	}
	return []string{path.Base(cgroupsPath)}
}

// inCgroupNamed tells whether a /proc/<pid>/cgroup text puts the process
// in a cgroup whose last element is one of leaves, in any hierarchy.
func inCgroupNamed(text string, leaves []string) error {
	var seen string
	for line := range strings.Lines(text) {
		parts := strings.SplitN(strings.TrimRight(line, "\n"), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, leaf := range leaves {
			if path.Base(parts[2]) == leaf {
				return nil
			}
		}
		if seen == "" || parts[0] == "0" {
			seen = parts[2]
		}
	}
	return fmt.Errorf("its cgroup is %q, not the sandbox's (%s)", seen, strings.Join(leaves, " or "))
}

// checkFirstSeen refuses a namespace that is not the one ref held when
// the pod was first seen (ref.ID, when set): a pid or a path that now
// names another namespace is not the pod's any more.
func checkFirstSeen(k Kernel, fd int, ref NamespaceRef, where string, ns sysctl.Namespace) error {
	if ref.ID == (NamespaceID{}) {
		return nil
	}
	id, err := k.Fstat(fd)
	if err != nil {
		return fmt.Errorf("%s namespace %s: %w", ns, where, err)
	}
	if id != ref.ID {
		return fmt.Errorf("%w: %s is not the %s namespace the pod had when first seen", ErrSandboxExited, where, ns)
	}
	return nil
}
