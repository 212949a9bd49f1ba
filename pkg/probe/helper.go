// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package probe

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

// helperArg0 is the argv[0] under which this binary runs as the user
// namespace probe's helper. Only UserNamespace starts a process so; main
// hands it to RunHelper before anything else (moby/sys reexec style).
const helperArg0 = "nri-sysctl-internal-userns-probe"

// The helper's user namespace maps its root to a host uid and gid that are
// not root, as the kubelet does for a pod with hostUsers: false. Mapping 0
// to 0 would give it host root's rights and hide what a pod meets.
const (
	podRootHostID = 100000
	podIDCount    = 65536
)

// Lines of the helper's protocol. The parent sends a line per name (the
// name, then each value to write, quoted, tab-separated) and an empty
// line; the helper answers, per name, one refusal line or one line per
// value, then helperReady, and holds its namespaces until its stdin closes.
const (
	helperRefused = "refused"
	helperValue   = "value"
	helperReady   = "ready"
	// notRegular stands for errNotRegular, which has no errno.
	notRegular = "not-regular"
	// Results of one value.
	valueTaken      = "stored"
	valueFailed     = "err"
	valueUnreadable = "unread"
)

// IsHelper tells whether this process was started as the probe's helper,
// from its argv (os.Args).
func IsHelper(args []string) bool { return len(args) > 0 && args[0] == helperArg0 }

// RunHelper runs the helper and returns its exit status. It runs inside
// fresh user, network, IPC and UTS namespaces, as their root (host uid
// podRootHostID), which is what runc is when it sets a user-namespace
// pod's sysctls: it opens each name for writing, nothing is written, and
// reports the refusals.
func RunHelper(args []string) int {
	if len(args) != 1 {
		fmt.Fprintf(os.Stderr, "%s: takes no arguments\n", helperArg0)
		return 2
	}
	if err := becomeNamespaceRoot(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", helperArg0, err)
		return 1
	}
	if err := serveHelper(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", helperArg0, err)
		return 1
	}
	return 0
}

func serveHelper(in io.Reader, out io.Writer) error {
	r := bufio.NewReader(in)
	w := bufio.NewWriter(out)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("reading names: %w", err)
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			break
		}
		name, values, err := decodeRequest(line)
		if err != nil {
			return err
		}
		path := sysctl.Path(sysctl.ProbeName(name))
		if err := checkWritable(path); err != nil {
			fmt.Fprintf(w, "%s\t%s\t%s\n", helperRefused, name, encodeOpenError(err))
			continue
		}
		stored := tryValues(path, values)
		for _, v := range values {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", helperValue, name, strconv.Quote(v), encodeStored(stored[v]))
		}
	}
	fmt.Fprintln(w, helperReady)
	if err := w.Flush(); err != nil {
		return err
	}
	// The parent now checks the host's view through /proc/<pid>/ns: the
	// namespaces must live until it closes stdin.
	_, err := io.Copy(io.Discard, r)
	return err
}

// encodeRequest is the parent's line for one name.
func encodeRequest(name string, values []string) string {
	var b strings.Builder
	b.WriteString(name)
	for _, v := range values {
		b.WriteString("\t" + strconv.Quote(v))
	}
	return b.String()
}

func decodeRequest(line string) (name string, values []string, err error) {
	fields := strings.Split(line, "\t")
	for _, q := range fields[1:] {
		v, err := strconv.Unquote(q)
		if err != nil {
			return "", nil, fmt.Errorf("bad request line %q", line)
		}
		values = append(values, v)
	}
	return fields[0], values, nil
}

// encodeStored is one value's result: the kernel's text (quoted), the
// write's errno, or that the file cannot be read back.
func encodeStored(s sysctl.Stored) string {
	switch {
	case s.Err != nil:
		return valueFailed + "\t" + encodeOpenError(s.Err)
	case s.Unreadable:
		return valueUnreadable
	}
	return valueTaken + "\t" + strconv.Quote(s.Text) + "\t" + strconv.Quote(s.Again)
}

// decodeStored undoes encodeStored; ok is false for text it does not make.
func decodeStored(fields []string) (s sysctl.Stored, ok bool) {
	switch {
	case len(fields) == 2 && fields[0] == valueFailed:
		s.Err = decodeOpenError(fields[1])
		return s, s.Err != nil
	case len(fields) == 1 && fields[0] == valueUnreadable:
		return sysctl.Stored{Unreadable: true}, true
	case len(fields) == 3 && fields[0] == valueTaken:
		text, err1 := strconv.Unquote(fields[1])
		again, err2 := strconv.Unquote(fields[2])
		return sysctl.Stored{Text: text, Again: again}, err1 == nil && err2 == nil
	}
	return s, false
}

func encodeOpenError(err error) string {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return strconv.Itoa(int(errno))
	}
	return notRegular
}

// decodeOpenError undoes encodeOpenError; it returns nil for a code that
// encodeOpenError does not make.
func decodeOpenError(code string) error {
	if code == notRegular {
		return errNotRegular
	}
	n, err := strconv.Atoi(code)
	if err != nil || n <= 0 {
		return nil
	}
	return unix.Errno(n)
}

// newHelper prepares a re-execution of this binary under arg0 in fresh
// user, network, IPC and UTS namespaces. It runs /proc/self/exe, the
// binary this process runs even if the file was replaced by an upgrade
// meanwhile, with an empty environment and no file but stdin, stdout and
// stderr.
func newHelper(ctx context.Context, arg0 string) (*exec.Cmd, error) {
	caps, err := allCapabilities()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "/proc/self/exe")
	cmd.Args = []string{arg0}
	cmd.Env = []string{} // nil would mean this process's environment
	cmd.WaitDelay = time.Second
	ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: podRootHostID, Size: podIDCount}}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
		UidMappings: ids,
		GidMappings: ids,
		// The exec stays host root's, who may run the binary whatever
		// its mode, and keeps every capability in the new namespace;
		// the helper then becomes the namespace's root (see
		// becomeNamespaceRoot), which is what runc is in a pod.
		AmbientCaps:                caps,
		GidMappingsEnableSetgroups: true,
		// Sent when the thread that forked the helper exits: the caller
		// forks from a locked thread that lives until the helper is
		// reaped.
		Pdeathsig: syscall.SIGKILL,
	}
	return cmd, nil
}

// allCapabilities lists every capability this kernel has.
func allCapabilities() ([]uintptr, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return nil, err
	}
	last, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("/proc/sys/kernel/cap_last_cap: %w", err)
	}
	caps := make([]uintptr, last+1)
	for c := range caps {
		caps[c] = uintptr(c)
	}
	return caps, nil
}

// becomeNamespaceRoot makes the helper uid and gid 0 of its user
// namespace, host podRootHostID, with no supplementary group, as runc is
// when it writes a pod's sysctls. Its capabilities there stay: it was not
// that namespace's root before.
func becomeNamespaceRoot() error {
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(0, 0, 0); err != nil {
		return fmt.Errorf("setresgid: %w", err)
	}
	if err := syscall.Setresuid(0, 0, 0); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	return nil
}

// startHelper starts cmd so that it inherits nothing but its stdio. Go
// opens every file close-on-exec, but not the ones this process inherited:
// containerd hands a pre-installed plugin its NRI socket as fd 3.
func startHelper(cmd *exec.Cmd) error {
	if err := closeOnExecInherited(); err != nil {
		return fmt.Errorf("marking inherited files close-on-exec: %w", err)
	}
	return cmd.Start()
}

// closeOnExecInherited marks every fd from 3 up close-on-exec, which only
// changes the ones Go did not open.
func closeOnExecInherited() error {
	err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
		// Before Linux 5.11.
		return closeOnExecByProcFD()
	}
	return err
}

func closeOnExecByProcFD() error {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		// EBADF: the directory's own fd, closed by now.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
			return fmt.Errorf("fd %d: %w", fd, err)
		}
	}
	return nil
}
