// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package probe

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/nsthread"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

// ErrHiddenInUserNamespace marks a key that namespaces owned by a user
// namespace do not have (net.core.xfrm_*, net.ipv6.route.* on 6.x).
var ErrHiddenInUserNamespace = errors.New("does not exist in a namespace that a user namespace owns")

// ErrDeniedInUserNamespace marks a key that the kernel will not let a
// writer set in namespaces owned by a user namespace: kernel.domainname to
// the pod's root (the UTS table belongs to host root), kernel.msgmax to host
// root (IPC keys belong to the namespace owner's root; capabilities do not
// help).
var ErrDeniedInUserNamespace = errors.New("permission denied")

// ErrUserNamespacesDisabled marks a node that lets no more user (or
// network, IPC, UTS) namespaces be created, as with user.max_user_namespaces
// set to 0: no pod can have one there either.
var ErrUserNamespacesDisabled = errors.New("this node lets no user namespace be created (user.max_user_namespaces)")

// errHelperNotStarted marks a helper that could not be started (no
// user namespace could be created for it, for example).
var errHelperNotStarted = errors.New("starting the helper")

// helperTimeout bounds one run of the helper; UserNamespace retries once.
const helperTimeout = 5 * time.Second

// UserNamespaceResult is what the kernel did to each writer in a pod with
// its own user namespace.
type UserNamespaceResult struct {
	// Refused holds, for each writer, the names it cannot set at all,
	// each with its reason.
	Refused map[sysctl.Writer]map[string]error
	// Stored holds, for each writer, what the kernel kept of each value
	// of the other names (sysctl.Judge reads it).
	Stored map[sysctl.Writer]map[string]map[string]sysctl.Stored
}

// HelperGIDs is the helper's gid mapping, one range as a pod's: pod GID
// ContainerID is host GID HostID, for Size GIDs. A value that names GIDs
// (ping_group_range) is written within it.
func HelperGIDs() (containerID, hostID, size uint32) { return 0, podRootHostID, podIDCount }

// UserNamespace reports which namespaced sysctls the kernel refuses, in a
// pod with its own user namespace, to each writer: runc inside the pod
// (spec mode) and the plugin as host root (namespace mode); and what it
// keeps of each value given for a writer (values[writer][name]: the
// caller writes GIDs as that writer sees them, see HelperGIDs). Each
// refused name comes with its reason. Names the kernel probe would refuse
// in any pod are its business; the caller should leave them out.
//
// A re-executed copy of this binary (see IsHelper) creates user, network,
// IPC and UTS namespaces, with its root mapped to a host uid that is not
// root, and opens each name for writing and writes each value as that
// root; then this process, as host root, enters those namespaces and does
// the same. The helper is stopped after helperTimeout and run once more if
// it fails; an error means there is no result, never a partial one.
func UserNamespace(values map[sysctl.Writer]map[string][]string) (UserNamespaceResult, error) {
	// Both writers are asked about every name either is given.
	writers := []sysctl.Writer{sysctl.WriterInPod, sysctl.WriterHost}
	probed := map[sysctl.Writer]map[string][]string{sysctl.WriterInPod: {}, sysctl.WriterHost: {}}
	for _, byName := range values {
		for name := range byName {
			switch sysctl.NamespaceOf(name) {
			case sysctl.Net, sysctl.IPC, sysctl.UTS:
				for _, w := range writers {
					probed[w][name] = values[w][name]
				}
			}
		}
	}
	res, err := runHelper(helperArg0, helperTimeout, probed)
	if errors.Is(err, ErrUserNamespacesDisabled) {
		return UserNamespaceResult{}, fmt.Errorf("user namespace probe: %w", err)
	}
	if err != nil {
		// Once more: the helper may have been killed from outside, or
		// been slow on a loaded node.
		if res, err = runHelper(helperArg0, helperTimeout, probed); err != nil {
			return UserNamespaceResult{}, fmt.Errorf("user namespace probe, run twice: %w", err)
		}
	}
	return res, nil
}

// runHelper runs the helper under arg0 (tests run others) once, and stops
// it after timeout. values has an entry for both writers, with the same
// names.
func runHelper(arg0 string, timeout time.Duration, values map[sysctl.Writer]map[string][]string) (UserNamespaceResult, error) {
	res := UserNamespaceResult{
		Refused: map[sysctl.Writer]map[string]error{sysctl.WriterInPod: {}, sysctl.WriterHost: {}},
		Stored:  map[sysctl.Writer]map[string]map[string]sysctl.Stored{sysctl.WriterInPod: {}, sysctl.WriterHost: {}},
	}
	inPod := values[sysctl.WriterInPod]
	if len(inPod) == 0 {
		return res, nil
	}
	err := talkToHelper(arg0, timeout, inPod,
		func(line string) error { return readAnswer(line, inPod, res) },
		func(pid int) error {
			var hostErr error
			nsthread.Run(func() { hostErr = probeAsHost(pid, values[sysctl.WriterHost], res) })
			return hostErr
		})
	if err != nil {
		return UserNamespaceResult{}, err
	}
	return res, nil
}

// talkToHelper starts the helper under arg0 in fresh namespaces, sends it
// each name with its values, hands each line of its answer to answer, and
// once it has answered all, calls then (if not nil) with its pid while it
// still holds its namespaces. The helper is killed after timeout, and in
// any case before talkToHelper returns: whatever it wrote lived in
// namespaces only it held.
func talkToHelper(arg0 string, timeout time.Duration, values map[string][]string, answer func(line string) error, then func(pid int) error) error {
	// The helper's Pdeathsig fires when the forking thread exits, and
	// nsthread ends threads on purpose: fork from a thread that nothing
	// else runs on until the helper is reaped.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd, err := newHelper(ctx, arg0)
	if err != nil {
		return err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := startHelper(cmd); err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return fmt.Errorf("%w: starting the helper: %w", ErrUserNamespacesDisabled, err)
		}
		return fmt.Errorf("%w: %w", errHelperNotStarted, err)
	}
	convErr := converse(stdin, stdout, values, answer)
	if convErr == nil && then != nil {
		convErr = then(cmd.Process.Pid)
	}
	// Done or failed, the helper now only holds its namespaces: kill it
	// rather than wait for a clean exit (a race-detector build sleeps a
	// second on exit).
	cmd.Process.Kill()
	waitErr := cmd.Wait()
	switch {
	case convErr == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("the helper did not finish within %s", timeout)
	}
	return fmt.Errorf("%w (helper: %w: %s)", convErr, waitErr, strings.TrimSpace(stderr.String()))
}

// converse sends the names and their values and hands each line of the
// helper's answer to answer, until the helper says it is ready.
func converse(stdin io.Writer, stdout io.Reader, values map[string][]string, answer func(line string) error) error {
	var req strings.Builder
	for _, name := range sortedNames(values) {
		req.WriteString(encodeRequest(name, values[name]) + "\n")
	}
	req.WriteString("\n")
	if _, err := io.WriteString(stdin, req.String()); err != nil {
		return fmt.Errorf("sending names to the helper: %w", err)
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		if line == helperReady {
			return nil
		}
		if err := answer(line); err != nil {
			return err
		}
	}
	return fmt.Errorf("the helper ended before reporting")
}

// readAnswer takes one line of the helper's answer into res.
func readAnswer(line string, asked map[string][]string, res UserNamespaceResult) error {
	fields := strings.Split(line, "\t")
	bad := fmt.Errorf("unexpected line from the helper: %q", line)
	if len(fields) < 3 {
		return bad
	}
	name := fields[1]
	if _, ok := asked[name]; !ok {
		return bad
	}
	switch fields[0] {
	case helperRefused:
		openErr := decodeOpenError(fields[2])
		if len(fields) != 3 || openErr == nil {
			return bad
		}
		if errors.Is(openErr, unix.EROFS) {
			// The plugin's /proc/sys is read-only (it runs in a
			// container), and a user namespace cannot remount it:
			// runc, writing through the pod's own fresh /proc, is
			// not refused for that. Nothing is known of this key.
			return nil
		}
		res.Refused[sysctl.WriterInPod][name] = userNamespaceRefusal(sysctl.WriterInPod, openErr)
	case helperValue:
		value, err := strconv.Unquote(fields[2])
		stored, ok := decodeStored(fields[3:])
		if err != nil || !ok {
			return bad
		}
		if res.Stored[sysctl.WriterInPod][name] == nil {
			res.Stored[sysctl.WriterInPod][name] = map[string]sysctl.Stored{}
		}
		res.Stored[sysctl.WriterInPod][name][value] = stored
	default:
		return bad
	}
	return nil
}

// probeAsHost enters the helper's namespaces, on a thread that nsthread
// throws away afterwards, and opens each name for writing as host root.
// The helper is this process's child, not yet reaped: its pid cannot
// name another process.
func probeAsHost(pid int, values map[string][]string, res UserNamespaceResult) error {
	if err := nsthread.WritableProcSys(); err != nil {
		return err
	}
	for _, ns := range []sysctl.Namespace{sysctl.Net, sysctl.IPC, sysctl.UTS} {
		path := "/proc/" + strconv.Itoa(pid) + "/ns/" + ns.ProcName()
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening the helper's %s namespace: %w", ns, err)
		}
		err = unix.Setns(fd, ns.CloneFlag())
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("entering the helper's %s namespace: %w", ns, err)
		}
	}
	for _, name := range sortedNames(values) {
		path := sysctl.Path(sysctl.ProbeName(name))
		if err := checkWritable(path); err != nil {
			res.Refused[sysctl.WriterHost][name] = userNamespaceRefusal(sysctl.WriterHost, err)
			continue
		}
		if len(values[name]) > 0 {
			res.Stored[sysctl.WriterHost][name] = tryValues(path, values[name])
		}
	}
	return nil
}

// userNamespaceRefusal turns the error of an open for writing into the
// reason the writer cannot set the key.
func userNamespaceRefusal(w sysctl.Writer, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return ErrHiddenInUserNamespace
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return ErrDeniedInUserNamespace
	case errors.Is(err, unix.EISDIR):
		return sysctl.ErrNotASysctl
	case errors.Is(err, errNotRegular):
		return err
	}
	return fmt.Errorf("cannot be opened for writing by %s: %w", w, err)
}
