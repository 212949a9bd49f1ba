// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// MaxFileSize is the largest config file accepted. A real config is a few
// kilobytes; the cap keeps a wrong --config (a log, a disk image) from
// filling memory.
const MaxFileSize = 1 << 20

// maxSymlinks is the kernel's own limit on symlinks followed in one lookup.
const maxSymlinks = 40

// openFlags never wait: O_NONBLOCK makes opening a FIFO return at once
// instead of waiting for a writer, O_NOCTTY keeps a terminal from becoming
// ours. The type check on the descriptor then refuses both.
const openFlags = os.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC

// Load reads and validates a file. It refuses anything but a regular file
// of at most MaxFileSize, but does not ask who could have written it:
// `validate` is often run by image builders as another user. check may be
// nil to skip the kernel probe.
func Load(file string, check KernelChecker) (*Config, error) {
	return load(file, false, check)
}

// LoadTrusted is Load for the plugin itself. Whoever can write the config
// sets sysctls in every pod, so it also refuses the file unless only root
// could have changed it, its directories up to / or a symlink on the way.
func LoadTrusted(file string, check KernelChecker) (*Config, error) {
	return load(file, true, check)
}

func load(file string, trusted bool, check KernelChecker) (*Config, error) {
	data, err := readStable(file, trusted)
	if err != nil {
		return nil, err
	}
	return Parse(file, data, check)
}

// ReadFile reads a regular file of at most MaxFileSize with Load's guards
// and none of its config checks: for other files a subcommand is handed
// (import-crio) and for the config watcher's digest. A FIFO, device or
// directory fails at once instead of blocking or being read forever.
func ReadFile(path string) ([]byte, error) {
	f, _, err := openRegular(path, openFlags)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readCapped(f)
}

// openRegular opens path without blocking and returns it only if the
// descriptor is a regular file (a notRegularError otherwise). A device or
// FIFO is refused before the open too: opening some devices has side
// effects. The check on the descriptor is the one that counts.
func openRegular(path string, flags int) (*os.File, os.FileInfo, error) {
	if info, err := os.Stat(path); err == nil && !info.Mode().IsRegular() {
		return nil, nil, notRegularError{info.Mode()}
	}
	if beforeOpenHook != nil {
		beforeOpenHook()
	}
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		return nil, nil, err
	}
	info, err := f.Stat()
	if err == nil && !info.Mode().IsRegular() {
		err = notRegularError{info.Mode()}
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, info, nil
}

// errTooLarge: a file holds more than MaxFileSize bytes.
var errTooLarge = fmt.Errorf("file is larger than the %d-byte (1 MiB) limit", MaxFileSize)

// readCapped reads one byte past the limit, which tells a file that is too
// large whatever fstat said its size was (it may grow, or be a /proc file).
func readCapped(f *os.File) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, errTooLarge
	}
	return data, nil
}

// notRegularError is a path that is not a regular file.
type notRegularError struct{ mode fs.FileMode }

func (e notRegularError) Error() string { return "it is " + fileKind(e.mode) + ", not a regular file" }

// readStable reads a file and makes sure it did not change meanwhile: an
// editor or config-management tool rewriting it in place could otherwise
// hand us half of the old text and half of the new.
func readStable(file string, trusted bool) ([]byte, error) {
	const attempts = 5
	for i := 0; i < attempts; i++ {
		data, stable, err := readOnce(file, trusted)
		if err != nil || stable {
			return data, err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, cannotRead(file, fmt.Errorf("file kept changing while being read (%d attempts); write it atomically (write a temporary file, then rename it)", attempts))
}

// Test hooks: beforeOpenHook runs between the trust walk and the open,
// afterReadHook between the read and the second fstat.
var beforeOpenHook, afterReadHook func()

// readOnce opens the file once and does every check on that descriptor, so
// that what is checked is what is read. It tells whether the file's size and
// modification time held still during the read: an atomic rename leaves the
// descriptor on the old, whole file, but an in-place rewrite changes it.
func readOnce(file string, trusted bool) (data []byte, stable bool, err error) {
	path, flags := file, openFlags
	var distrust []string
	if trusted {
		if path, distrust, err = resolveTrusted(file); err != nil {
			return nil, false, cannotRead(file, err)
		}
		// Every symlink is resolved: one here now was put there since.
		flags |= unix.O_NOFOLLOW
	}
	where := file
	if path != file {
		where = file + " -> " + path
	}
	problems := make(Problems, 0, len(distrust))
	for _, reason := range distrust {
		problems = append(problems, Problem{File: where, Reason: reason})
	}
	f, before, err := openRegular(path, flags)
	var special notRegularError
	switch {
	case errors.As(err, &special):
		return nil, false, append(problems, notRegular(where, special.mode))
	case trusted && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ELOOP)):
		// Replaced since the walk, as a ConfigMap update does: walk again.
		return nil, false, nil
	case err != nil:
		return nil, false, append(problems, cannotRead(file, err)...)
	}
	defer f.Close()
	if trusted {
		for _, reason := range untrustedFile(path, before) {
			problems = append(problems, Problem{File: where, Reason: reason})
		}
	}
	if len(problems) > 0 {
		return nil, false, problems
	}
	if data, err = readCapped(f); errors.Is(err, errTooLarge) {
		return nil, false, tooLarge(where)
	} else if err != nil {
		return nil, false, cannotRead(file, err)
	}
	if afterReadHook != nil {
		afterReadHook()
	}
	after, err := f.Stat()
	if err != nil {
		return nil, false, cannotRead(file, err)
	}
	stable = before.Size() == after.Size() && before.ModTime().Equal(after.ModTime()) && int64(len(data)) == after.Size()
	if stable {
		// A writer rewriting the file in place can pause between two
		// writes, and what was read is then a valid prefix with the
		// same size and mtime (mtime moves in clock ticks). A file
		// changed moments ago counts only once it has held still.
		if age := time.Since(after.ModTime()); age < settleTime {
			time.Sleep(settleTime - age)
			settled, err := f.Stat()
			if err != nil {
				return nil, false, cannotRead(file, err)
			}
			stable = settled.Size() == after.Size() && settled.ModTime().Equal(after.ModTime())
		}
	}
	return data, stable, nil
}

// settleTime is how long a just-written file must hold still to be read.
const settleTime = 50 * time.Millisecond

// resolveTrusted follows the path one name at a time, as the kernel does,
// and returns the file it leads to with every reason why someone other than
// root could have changed what it leads to. Each directory on the way must
// be root's and not writable by group or others, like sshd's StrictModes;
// each symlink must be root's (a symlink's own mode is always 0777). The
// file itself is checked through its descriptor, by untrustedFile.
func resolveTrusted(file string) (resolved string, distrust []string, err error) {
	abs := file
	if !filepath.IsAbs(file) {
		// Not filepath.Abs: it cleans "link/.." away lexically, while
		// the kernel takes ".." after following the link.
		wd, err := os.Getwd()
		if err != nil {
			return "", nil, err
		}
		abs = wd + "/" + file
	}
	root, err := os.Lstat("/")
	if err != nil {
		return "", nil, err
	}
	distrust = untrustedDirectory("/", root)
	seen := map[string]bool{"/": true}
	resolved = "/"
	links := 0
	for pending := components(abs); len(pending) > 0; {
		name := pending[0]
		pending = pending[1:]
		if name == ".." {
			// resolved holds no symlink, so its lexical parent is its
			// real one.
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, name)
		info, err := os.Lstat(next)
		if err != nil {
			return "", nil, err
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if links++; links > maxSymlinks {
				return "", nil, &fs.PathError{Op: "open", Path: file, Err: syscall.ELOOP}
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", nil, err
			}
			if uid := owner(info); uid != 0 && !seen[next] {
				distrust = append(distrust, fmt.Sprintf(
					"symlink %s (-> %s) is owned by uid %d, not root, and its owner can point it at another file; fix with: chown -h root %s (or pass --allow-insecure-config)", next, target, uid, next))
			}
			seen[next] = true
			if filepath.IsAbs(target) {
				resolved = "/"
			}
			pending = append(components(target), pending...)
		case info.IsDir() && len(pending) > 0:
			if !seen[next] {
				distrust = append(distrust, untrustedDirectory(next, info)...)
			}
			seen[next] = true
			resolved = next
		default:
			// The file itself, or a non-directory that the next Lstat
			// refuses with "not a directory".
			resolved = next
		}
	}
	return resolved, distrust, nil
}

// components splits a path into its names, leaving out empty ones and ".";
// ".." stays, to be taken after the symlinks before it are followed.
func components(path string) []string {
	var names []string
	for _, name := range strings.Split(path, "/") {
		if name != "" && name != "." {
			names = append(names, name)
		}
	}
	return names
}

// untrustedDirectory says why someone other than root could replace a file
// in dir. Group- or world-writable is refused even with the sticky bit (as
// on /tmp), as sshd refuses it: the sticky bit keeps others from removing
// root's files, not from creating a name that is missing, and a config has
// no reason to live in a shared directory.
func untrustedDirectory(dir string, info fs.FileInfo) []string {
	var reasons []string
	if uid := owner(info); uid != 0 {
		reasons = append(reasons, fmt.Sprintf(
			"directory %s is owned by uid %d, not root, and its owner can replace the config; fix with: chown root %s (or pass --allow-insecure-config)", dir, uid, dir))
	}
	if modeBits(info)&0o022 != 0 && !onReadOnlyMount(dir) {
		reasons = append(reasons, fmt.Sprintf(
			"directory %s is writable by group or others (mode %04o), and whoever can write it can replace the config; fix with: chmod go-w %s (or pass --allow-insecure-config)", dir, modeBits(info), dir))
	}
	return reasons
}

// onReadOnlyMount tells whether dir is on a read-only mount, where its
// write bits give nobody a way in: a Kubernetes ConfigMap volume is a 0777
// directory, mounted read-only into the pod.
func onReadOnlyMount(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Flags&unix.ST_RDONLY != 0
}

// untrustedFile says why someone other than root could have written the
// config file.
func untrustedFile(path string, info fs.FileInfo) []string {
	var reasons []string
	if modeBits(info)&0o022 != 0 {
		reasons = append(reasons, fmt.Sprintf(
			"config is writable by group or others (mode %04o), and whoever can write it sets sysctls in every pod; fix with: chmod go-w %s (or pass --allow-insecure-config)", modeBits(info), path))
	}
	if uid := owner(info); uid != 0 {
		reasons = append(reasons, fmt.Sprintf(
			"config is owned by uid %d, not root, and its owner could set sysctls in every pod; fix with: chown root %s (or pass --allow-insecure-config)", uid, path))
	}
	return reasons
}

func owner(info fs.FileInfo) uint32 {
	return info.Sys().(*syscall.Stat_t).Uid
}

// modeBits are the permission bits with setuid, setgid and sticky, so that
// /tmp shows as 1777.
func modeBits(info fs.FileInfo) uint32 {
	return info.Sys().(*syscall.Stat_t).Mode & 0o7777
}

func cannotRead(file string, err error) Problems {
	return Problems{{File: file, Reason: fmt.Sprintf("cannot read config: %v", err)}}
}

func notRegular(where string, mode fs.FileMode) Problem {
	return Problem{File: where, Reason: "cannot read config: " + notRegularError{mode}.Error() + "; point --config at the config file"}
}

// fileKind names what a path that is not a regular file is.
func fileKind(mode fs.FileMode) string {
	switch {
	case mode.IsDir():
		return "a directory"
	case mode&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeCharDevice != 0:
		return "a character device"
	case mode&fs.ModeDevice != 0:
		return "a block device"
	}
	return "a special file (mode " + mode.String() + ")"
}

func tooLarge(where string) Problems {
	return Problems{{File: where, Reason: "cannot read config: " + errTooLarge.Error() + "; a config is a few kilobytes, so check that --config names the config file"}}
}
