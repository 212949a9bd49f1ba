// Package nswrite writes sysctls straight into a pod's own namespaces, for
// runtimes that drop NRI sysctl adjustments.
package nswrite

import (
	"errors"
	"fmt"
	"os"

	"github.com/nri-sysctl/nri-sysctl/pkg/nsthread"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

// Target names the pod namespaces to write into. An empty path means the
// pod has no namespace of that kind of its own, and keys for it are refused.
type Target struct {
	NetNSPath string
	IPCNSPath string
	UTSNSPath string
}

// WriteError is one sysctl that could not be written.
type WriteError struct {
	Key string
	Err error
}

func (e WriteError) Error() string { return fmt.Sprintf("%s: %v", e.Key, e.Err) }

// Write sets each sysctl inside the target namespaces. It returns one error
// per failed key; the others are still written.
func Write(t Target, sysctls []sysctl.Sysctl) []WriteError {
	var errs []WriteError
	nsthread.Run(func() { errs = writeLocked(t, sysctls) })
	return errs
}

func writeLocked(t Target, sysctls []sysctl.Sysctl) []WriteError {
	var errs []WriteError
	if err := writableProcSys(); err != nil {
		for _, s := range sysctls {
			errs = append(errs, WriteError{Key: s.Key(), Err: err})
		}
		return errs
	}
	entered := map[sysctl.Namespace]error{}
	enter := func(ns sysctl.Namespace) error {
		if err, done := entered[ns]; done {
			return err
		}
		err := setns(t, ns)
		entered[ns] = err
		return err
	}
	for _, s := range sysctls {
		ns := sysctl.NamespaceOf(s.Key())
		if err := enter(ns); err != nil {
			errs = append(errs, WriteError{Key: s.Key(), Err: err})
			continue
		}
		if err := os.WriteFile(sysctl.Path(s.Key()), []byte(s.Value()), 0o644); err != nil {
			errs = append(errs, WriteError{Key: s.Key(), Err: unwrapPathError(err)})
		}
	}
	return errs
}

// setns moves the calling (locked) thread into the pod's namespace for ns.
func setns(t Target, ns sysctl.Namespace) error {
	var path string
	var flag int
	switch ns {
	case sysctl.Net:
		path, flag = t.NetNSPath, unix.CLONE_NEWNET
	case sysctl.IPC:
		path, flag = t.IPCNSPath, unix.CLONE_NEWIPC
	case sysctl.UTS:
		path, flag = t.UTSNSPath, unix.CLONE_NEWUTS
	default:
		return fmt.Errorf("namespace mode cannot write %s sysctls", ns)
	}
	if path == "" {
		return fmt.Errorf("pod has no %s namespace of its own", ns)
	}
	if err := refuseOwnNamespace(path, ns); err != nil {
		return err
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening %s namespace %s: %w", ns, path, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, flag); err != nil {
		return fmt.Errorf("entering %s namespace %s: %w", ns, path, err)
	}
	return nil
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("writing %s: %w", pe.Path, pe.Err)
	}
	return err
}

// refuseOwnNamespace is a last guard against writing into the host: the
// plugin runs in the host's namespaces, so a target that is the plugin's own
// namespace is the host's.
func refuseOwnNamespace(path string, ns sysctl.Namespace) error {
	var target, own unix.Stat_t
	if err := unix.Stat(path, &target); err != nil {
		return fmt.Errorf("%s namespace %s: %w", ns, path, err)
	}
	ownPath := "/proc/thread-self/ns/" + map[sysctl.Namespace]string{sysctl.Net: "net", sysctl.IPC: "ipc", sysctl.UTS: "uts"}[ns]
	if err := unix.Stat(ownPath, &own); err != nil {
		return fmt.Errorf("reading %s: %w", ownPath, err)
	}
	if target.Dev == own.Dev && target.Ino == own.Ino {
		return fmt.Errorf("refusing to write: %s is the host's %s namespace", path, ns)
	}
	return nil
}
