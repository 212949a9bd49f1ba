// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podns

import (
	"errors"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/nri-sysctl/nri-sysctl/pkg/nsthread"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

// procSys is the /proc/sys one visit reads and writes a pod's keys
// through: a proc instance of the visit's own, mounted nowhere and gone
// when the visit closes it, else the plugin's /proc/sys.
//
// Why an instance of its own: proc keeps a dentry of /proc/sys/net (and
// kernel) per namespace that looked there, all in one hash chain, and
// each lookup compares them one by one under the kernel's one sysctl
// lock. Through the plugin's /proc every visit added the pod's to the
// chain for as long as the pod lives, and walked past the other pods' at
// each key: on 200 running pods, a fifth of a convergence's CPU (perf,
// docs/benchmarks.md), and a longer chain for every other reader of the
// node's /proc. A visit's own instance holds only its pod's, and frees
// them at close. It is writable even where the plugin's /proc/sys is
// mounted read-only, so no mount namespace is copied to remount it.
// Under a seccomp filter (the systemd unit, a container's RuntimeDefault)
// the visit uses the plugin's /proc/sys, as before. What /proc/sys shows
// follows the namespaces of the thread that looks, whichever proc
// instance it looks through.
type procSys struct {
	dir int // the instance's sys directory; -1: the plugin's /proc/sys
}

// errSeccompFiltered: the plugin runs under a seccomp filter, which may
// kill it (SIGSYS) at a call it denies rather than fail the call. The
// systemd unit denies @mount so, and rightly: fsmount would let the plugin
// reach file systems the unit protects (cgroup2, sysfs).
var errSeccompFiltered = errors.New("under a seccomp filter: no proc instance of its own")

// seccompFiltered tells, once, whether the process runs under a seccomp
// filter (the Seccomp line of /proc/self/status; a filter is inherited
// and never lifted).
var seccompFiltered = sync.OnceValue(func() bool {
	status, err := os.ReadFile("/proc/self/status")
	return err != nil || underSeccompFilter(string(status))
})

// underSeccompFilter reads a /proc/<pid>/status text: "Seccomp: 2" is a
// filter, 1 strict mode; 0, or no such line (a kernel without seccomp),
// none.
func underSeccompFilter(status string) bool {
	for line := range strings.Lines(status) {
		if v, ok := strings.CutPrefix(line, "Seccomp:"); ok {
			return strings.TrimSpace(v) != "0"
		}
	}
	return false
}

// openProcInstance mounts a proc instance of its own, attached nowhere,
// and returns an fd of its root; swapped in tests for a kernel or a
// seccomp profile that refuses it (fsopen is Linux 5.2+, and needs
// CAP_SYS_ADMIN as setns does). Under a seccomp filter it does not try
// (errSeccompFiltered).
var openProcInstance = func() (int, error) {
	if seccompFiltered() {
		return -1, errSeccompFiltered
	}
	fsfd, err := unix.Fsopen("proc", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, err
	}
	return unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
}

// openProcSys returns the visit's /proc/sys: its own proc instance's
// when one can be mounted, else the plugin's.
func openProcSys() procSys {
	root, err := openProcInstance()
	if err != nil {
		return procSys{dir: -1}
	}
	defer unix.Close(root)
	dir, err := unix.Openat(root, "sys", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return procSys{dir: -1}
	}
	return procSys{dir: dir}
}

// Close frees the instance and the dentries its lookups made.
func (p procSys) Close() {
	if p.dir >= 0 {
		unix.Close(p.dir)
	}
}

// Writable makes sure a write can go through: the plugin's /proc/sys may
// be read-only (nsthread.WritableProcSys); a visit's own instance is not.
func (p procSys) Writable() error {
	if p.dir >= 0 {
		return nil
	}
	return nsthread.WritableProcSys()
}

// Read returns key's value, with surrounding white space.
func (p procSys) Read(key string) ([]byte, error) {
	f, err := p.open(key, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// Write sets key to value; an error names the key's /proc/sys path.
func (p procSys) Write(key, value string) error {
	f, err := p.open(key, unix.O_WRONLY)
	if err != nil {
		return err
	}
	data := []byte(value)
	if value == "" {
		// A write of no bytes changes nothing; a newline is the empty
		// value (an empty list, ip_local_reserved_ports').
		data = []byte("\n")
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// open opens key's file, named by its /proc/sys path in errors.
func (p procSys) open(key string, mode int) (*os.File, error) {
	path := sysctl.Path(key)
	if p.dir < 0 {
		return os.OpenFile(path, mode, 0)
	}
	fd, err := unix.Openat(p.dir, strings.TrimPrefix(path, "/proc/sys/"), mode|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}
