// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package probe

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

// probeUserKeys checks user.* names and their values for Kernel, into
// refused and stored.
//
// user.* limits belong to a user namespace: /proc/sys/user shows, and
// takes writes to, the limits of the writer's own user namespace. This
// process's is the caller's (the host's, for the plugin on a node), and a
// multithreaded process cannot leave it (setns and unshare refuse
// CLONE_NEWUSER), so nothing here ever opens /proc/sys/user. The helper
// (see IsHelper) is started in a user namespace of its own, whose root
// holds CAP_SYS_RESOURCE there and so may write its limits, as runc in a
// pod with its own user namespace does: every value lands in that
// namespace, which dies with the helper, even if either process is killed
// between a write and its restore.
//
// Where no helper can be started (no user namespace can be created, as
// with user.max_user_namespaces=0), or the helper's /proc/sys is read-only
// (the plugin in a container), the names and values are checked without a
// write instead (checkUserKeyOffline).
func probeUserKeys(values map[string][]string, refused map[string]error, stored map[string]map[string]sysctl.Stored) error {
	run := func() (map[string]error, map[string]map[string]sysctl.Stored, []string, error) {
		r, s := map[string]error{}, map[string]map[string]sysctl.Stored{}
		var readOnly []string
		err := talkToHelper(helperArg0, helperTimeout, values, func(line string) error {
			ro, err := readKernelAnswer(line, values, r, s)
			if ro != "" {
				readOnly = append(readOnly, ro)
			}
			return err
		}, nil)
		return r, s, readOnly, err
	}
	r, s, readOnly, err := run()
	if err != nil && !errors.Is(err, ErrUserNamespacesDisabled) && !errors.Is(err, errHelperNotStarted) {
		// Once more: the helper may have been killed from outside, or
		// been slow on a loaded node.
		r, s, readOnly, err = run()
		if err != nil && !errors.Is(err, ErrUserNamespacesDisabled) && !errors.Is(err, errHelperNotStarted) {
			return fmt.Errorf("user.* keys, in a user namespace of the probe's own, run twice: %w", err)
		}
	}
	if err != nil {
		// No user namespace at all: no write anywhere.
		readOnly, r, s = sortedNames(values), map[string]error{}, map[string]map[string]sysctl.Stored{}
	}
	for name, why := range r {
		refused[name] = why
	}
	for name, byValue := range s {
		stored[name] = byValue
	}
	for _, name := range readOnly {
		if why := checkUserKeyOffline(name, values[name], stored); why != nil {
			refused[name] = why
		}
	}
	return nil
}

// readKernelAnswer takes one line of the helper's answer into refused and
// stored, with the kernel probe's reasons. A name the helper met only on
// a read-only /proc/sys is returned in readOnly, for the offline check.
func readKernelAnswer(line string, asked map[string][]string, refused map[string]error, stored map[string]map[string]sysctl.Stored) (readOnly string, err error) {
	fields := strings.Split(line, "\t")
	bad := fmt.Errorf("unexpected line from the helper: %q", line)
	if len(fields) < 3 {
		return "", bad
	}
	name := fields[1]
	if _, ok := asked[name]; !ok {
		return "", bad
	}
	switch fields[0] {
	case helperRefused:
		openErr := decodeOpenError(fields[2])
		if len(fields) != 3 || openErr == nil {
			return "", bad
		}
		if errors.Is(openErr, unix.EROFS) {
			return name, nil
		}
		refused[name] = openRefusal(openErr)
	case helperValue:
		value, err := strconv.Unquote(fields[2])
		s, ok := decodeStored(fields[3:])
		if err != nil || !ok {
			return "", bad
		}
		if stored[name] == nil {
			stored[name] = map[string]sysctl.Stored{}
		}
		stored[name][value] = s
	default:
		return "", bad
	}
	return "", nil
}

// checkUserKeyOffline checks a user.* name and its values without writing
// anything: the name must be a file under /proc/sys/user (which shows the
// same names in every user namespace), and each value is parsed as the
// kernel parses these limits (proc_dointvec_minmax from 0 to INT_MAX, a
// leading 0x or 0 giving hex or octal), into stored as if written.
func checkUserKeyOffline(name string, values []string, stored map[string]map[string]sysctl.Stored) error {
	var st unix.Stat_t
	err := unix.Stat(sysctl.Path(name), &st)
	switch {
	case errors.Is(err, unix.ENOENT):
		return sysctl.ErrMissing
	case err != nil:
		return fmt.Errorf("cannot be checked: %w", err)
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return sysctl.ErrNotASysctl
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return errNotRegular
	}
	byValue := map[string]sysctl.Stored{}
	for _, v := range values {
		if n, ok := parseUserLimit(v); ok {
			byValue[v] = sysctl.Stored{Text: strconv.FormatUint(n, 10)}
		} else {
			byValue[v] = sysctl.Stored{Err: unix.EINVAL}
		}
	}
	stored[name] = byValue
	return nil
}

// parseUserLimit parses a user.* limit as the kernel does: white space
// around it, then an unsigned number in C notation (0x hex, a leading 0
// octal), at most INT_MAX. A sign is refused: "-0" aside, no negative
// number is in range, and "+" is not taken.
func parseUserLimit(v string) (uint64, bool) {
	s := strings.TrimSpace(v)
	base := 10
	switch {
	case len(s) > 2 && (s[:2] == "0x" || s[:2] == "0X"):
		s, base = s[2:], 16
	case len(s) > 1 && s[0] == '0':
		s, base = s[1:], 8
	}
	if s == "" || strings.ContainsAny(s, "+-_") {
		return 0, false
	}
	n, err := strconv.ParseUint(s, base, 64)
	if err != nil || n > 1<<31-1 {
		return 0, false
	}
	return n, true
}

// openRefusal is kernelRefusal's reason for an open's error.
func openRefusal(err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return sysctl.ErrMissing
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return sysctl.ErrReadOnly
	case errors.Is(err, unix.EISDIR):
		return sysctl.ErrNotASysctl
	case errors.Is(err, errNotRegular):
		return err
	}
	return fmt.Errorf("cannot be opened for writing in a fresh pod namespace: %w", err)
}
