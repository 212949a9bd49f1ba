// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package probe asks the running kernel which sysctls a pod can be given.
// It needs root: it creates throw-away namespaces, and the user namespace
// probe re-executes this binary (see IsHelper).
package probe

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nri-sysctl/nri-sysctl/pkg/nsthread"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

// Kernel checks each normalized name, and each value it may be given, as
// a pod's writer will meet them: inside fresh network, IPC and UTS
// namespaces, as host root; user.* keys in a fresh user namespace of a
// re-executed helper (see probeUserKeys). Host files are no guide: many net.* keys exist
// on the host but not in a new network namespace, and some exist there
// read-only; and only a write tells whether the kernel takes a value as
// written ("abc" is refused, "010" is read as octal 8).
//
// refused holds the names that cannot be set at all, each with its reason
// (sysctl.ErrMissing, sysctl.ErrReadOnly, sysctl.ErrNotASysctl or the open
// error). stored holds, for every other name, what the kernel did with
// each of its values (sysctl.Judge reads it); each value is written to a
// file that holds its first text again. A per-interface key is written to
// its stand-in entry (sysctl.ProbeName). err is set when the probe itself
// could not run, for example without CAP_SYS_ADMIN. It satisfies
// config.KernelChecker.
func Kernel(values map[string][]string) (refused map[string]error, stored map[string]map[string]sysctl.Stored, err error) {
	inOwnNamespaces, userKeys := map[string][]string{}, map[string][]string{}
	for name, v := range values {
		switch sysctl.NamespaceOf(name) {
		case sysctl.NotNamespaced:
		case sysctl.User:
			// Never in this process: its user namespace is the
			// caller's (the host's), and a multithreaded process
			// cannot leave it.
			userKeys[name] = v
		default:
			inOwnNamespaces[name] = v
		}
	}
	nsthread.Run(func() {
		if err = unshareFreshPodNamespaces(); err != nil {
			err = fmt.Errorf("kernel probe: cannot create throw-away namespaces (needs root): %w; use --skip-kernel-check to leave the kernel probe out", err)
			return
		}
		// In a container /proc/sys is read-only, which says nothing of
		// what a pod may set.
		if err = nsthread.WritableProcSys(); err != nil {
			err = fmt.Errorf("kernel probe: %w", err)
			return
		}
		refused = map[string]error{}
		stored = map[string]map[string]sysctl.Stored{}
		for _, name := range sortedNames(inOwnNamespaces) {
			path := sysctl.Path(sysctl.ProbeName(name))
			if why := kernelRefusal(path); why != nil {
				refused[name] = why
				continue
			}
			stored[name] = tryValues(path, values[name])
		}
	})
	if err != nil || len(userKeys) == 0 {
		return refused, stored, err
	}
	if err := probeUserKeys(userKeys, refused, stored); err != nil {
		return nil, nil, fmt.Errorf("kernel probe: %w", err)
	}
	return refused, stored, nil
}

// kernelRefusal says why the sysctl file at path cannot be set in a fresh
// pod namespace, or returns nil when it can.
func kernelRefusal(path string) error {
	if err := checkWritable(path); err != nil {
		return openRefusal(err)
	}
	return nil
}

// errNotRegular marks a path that opened but is not a regular file, so not
// a sysctl.
var errNotRegular = errors.New("is not a regular file, so not a sysctl")

// checkWritable opens path for writing, as the pod's writer will, and
// closes it: the kernel checks sysctl permissions at open, so nothing is
// written. Only a regular file passes; the error is the open's errno
// otherwise.
func checkWritable(path string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errNotRegular
	}
	return nil
}

// KernelCheck is the kernel check a config is loaded with: Kernel, or
// none when skip (--skip-kernel-check).
func KernelCheck(skip bool) func(map[string][]string) (map[string]error, map[string]map[string]sysctl.Stored, error) {
	if skip {
		return nil
	}
	return Kernel
}

// Fresh reads names in throw-away network, IPC and UTS namespaces, as a
// pod's start: what an untouched pod holds, and what a key of a running
// pod goes back to when its value before the plugin's first write is
// unknown. A per-interface key is read from its stand-in entry
// (sysctl.ProbeName), whose value an interface made in the pod takes. A
// name a fresh namespace lacks (a user.* key, one not namespaced) is left
// out.
func Fresh(names []string) (map[string]string, error) {
	out := map[string]string{}
	var err error
	nsthread.Run(func() {
		if err = unshareFreshPodNamespaces(); err != nil {
			err = fmt.Errorf("fresh namespaces: %w", err)
			return
		}
		for _, name := range names {
			switch sysctl.NamespaceOf(name) {
			case sysctl.NotNamespaced, sysctl.User:
				continue
			}
			if data, rerr := os.ReadFile(sysctl.Path(sysctl.ProbeName(name))); rerr == nil {
				out[name] = strings.TrimSpace(string(data))
			}
		}
	})
	return out, err
}

// unshareFreshPodNamespaces gives the calling (locked, thrown-away)
// thread network, IPC and UTS namespaces of its own, as a new pod has. Its
// user namespace stays the caller's: a multithreaded process cannot leave
// it (user keys are probed in a helper process, userns.go).
func unshareFreshPodNamespaces() error {
	return unix.Unshare(sysctl.Net.CloneFlag() | sysctl.IPC.CloneFlag() | sysctl.UTS.CloneFlag())
}
