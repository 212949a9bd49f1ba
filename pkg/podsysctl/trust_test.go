// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podsysctl

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

const nobody = 65534

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test makes files owned by another user")
	}
}

// listen serves a unix socket at path from this process until the test ends.
func listen(t *testing.T, path string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

func mkdir(t *testing.T, path string, mode uint32, uid int) string {
	t.Helper()
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(path, mode); err != nil { // past the umask; raw bits, sticky included
		t.Fatal(err)
	}
	if err := os.Lchown(path, uid, uid); err != nil {
		t.Fatal(err)
	}
	return path
}

func symlink(t *testing.T, target, path string, uid int) string {
	t.Helper()
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(path, uid, uid); err != nil {
		t.Fatal(err)
	}
	return path
}

// A socket path is trusted only when no one but root can
// change what it names.
func TestTrustedSocketPath(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	good := mkdir(t, filepath.Join(root, "run"), 0o755, 0)
	sock := filepath.Join(good, "containerd.sock")
	listen(t, sock)
	open := mkdir(t, filepath.Join(root, "open"), 0o777, 0)
	listen(t, filepath.Join(open, "c.sock"))
	groupW := mkdir(t, filepath.Join(root, "groupw"), 0o775, 0)
	listen(t, filepath.Join(groupW, "c.sock"))
	users := mkdir(t, filepath.Join(root, "users"), 0o755, nobody)
	listen(t, filepath.Join(users, "c.sock"))
	sticky := mkdir(t, filepath.Join(root, "sticky"), 0o1777, 0)
	stickyRoot := mkdir(t, filepath.Join(sticky, "root"), 0o755, 0)
	listen(t, filepath.Join(stickyRoot, "c.sock"))
	stickyUser := mkdir(t, filepath.Join(sticky, "user"), 0o755, nobody)
	listen(t, filepath.Join(stickyUser, "c.sock"))
	if err := os.WriteFile(filepath.Join(good, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	symlink(t, sock, filepath.Join(good, "link.sock"), 0)
	symlink(t, "containerd.sock", filepath.Join(good, "relative.sock"), 0)
	symlink(t, sock, filepath.Join(good, "users-link.sock"), nobody)
	symlink(t, sock, filepath.Join(users, "link.sock"), 0)
	symlink(t, filepath.Join(users, "c.sock"), filepath.Join(good, "to-users.sock"), 0)
	symlink(t, good, filepath.Join(root, "var-run"), 0) // like /var/run -> /run
	symlink(t, "loop", filepath.Join(good, "loop"), 0)

	for _, tt := range []struct {
		path, wantErr string
	}{
		{sock, ""},
		{filepath.Join(good, "link.sock"), ""},
		{filepath.Join(good, "relative.sock"), ""},
		{filepath.Join(root, "var-run", "containerd.sock"), ""},
		{filepath.Join(stickyRoot, "c.sock"), ""},
		{filepath.Join(open, "c.sock"), "is writable by group or others (mode 0777)"},
		{filepath.Join(groupW, "c.sock"), "is writable by group or others (mode 0775)"},
		{filepath.Join(users, "c.sock"), users + " is owned by uid 65534, not root"},
		{filepath.Join(stickyUser, "c.sock"), stickyUser + " is owned by uid 65534, not root"},
		{filepath.Join(good, "users-link.sock"), "users-link.sock is owned by uid 65534, not root"},
		{filepath.Join(users, "link.sock"), users + " is owned by uid 65534, not root"},
		{filepath.Join(good, "to-users.sock"), users + " is owned by uid 65534, not root"},
		{filepath.Join(good, "file"), "is not a socket"},
		{good, "is a directory, not a socket"},
		{filepath.Join(good, "loop"), "more than 40 symbolic links"},
		{filepath.Join(good, "absent.sock"), "no such file"},
		{"run/containerd.sock", "is not an absolute path"},
	} {
		err := TrustedSocketPath(tt.path)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: %v, want trusted", tt.path, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: %v, want an error with %q", tt.path, err, tt.wantErr)
		}
	}
}

// openTempDir is a temporary directory another user can traverse, as
// t.TempDir's (mode 0700) is not.
func openTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "trust")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// serveAs starts a process of the given uid serving a unix socket at path
// (the test binary, fakeServerEnv), and returns its pid.
func serveAs(t *testing.T, uid int, path string) int {
	t.Helper()
	// A copy of the test binary that the user can run: go test's own is
	// in a directory only root can enter.
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(openTempDir(t), "server")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run", "^$")
	paths, _ := json.Marshal([]string{path})
	cmd.Env = append(os.Environ(), fakeServerEnv+"="+string(paths))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "listening\n" {
		t.Fatalf("server as uid %d: %q, %v", uid, line, err)
	}
	return cmd.Process.Pid
}

// Every connection is checked, not a throwaway one
// before: a socket swapped after a first good connection is refused at
// the next, for its path or for who serves it.
func TestTrustedDialerChecksEveryConnection(t *testing.T) {
	needRoot(t)
	root := openTempDir(t)
	run := mkdir(t, filepath.Join(root, "run"), 0o755, 0)
	sock := filepath.Join(run, "containerd.sock")
	listen(t, sock)
	dial := func(wantPID int) error {
		conn, err := TrustedDialer(sock, wantPID)(context.Background(), "ignored")
		if err == nil {
			conn.Close()
		}
		return err
	}
	if err := dial(os.Getpid()); err != nil {
		t.Fatalf("root's socket, served by the expected pid: %v", err)
	}
	if err := dial(0); err != nil {
		t.Fatalf("root's socket, no pid expected (a DaemonSet without hostPID): %v", err)
	}
	if err := dial(os.Getpid() + 100000); !errors.Is(err, errPeer) || !strings.Contains(err.Error(), "(the process that started the plugin)") {
		t.Errorf("served by another pid than expected: %v, want a refusal naming the pid", err)
	}

	// The swap: a local user's server, its socket made root's (the worst
	// case: a path check alone would pass it).
	userDir := mkdir(t, filepath.Join(root, "user"), 0o777, 0)
	userSock := filepath.Join(userDir, "c.sock")
	pid := serveAs(t, nobody, userSock)
	if err := os.Lchown(userSock, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(userSock, sock); err != nil {
		t.Fatal(err)
	}
	err := dial(0)
	if !errors.Is(err, errPeer) || !strings.Contains(err.Error(), "served by uid 65534, not root") {
		t.Errorf("after the swap to uid %d's server (pid %d): %v, want a refusal", nobody, pid, err)
	}
}

// The review's attack: as uid 65534, a symlink in a
// directory of its own points at the real socket for the check, to be
// swapped later. The path is refused from the first connection on.
func TestTrustedDialerRefusesAUsersSymlink(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	run := mkdir(t, filepath.Join(root, "run"), 0o755, 0)
	realSock := filepath.Join(run, "containerd.sock")
	listen(t, realSock)
	attacker := mkdir(t, filepath.Join(root, "attacker"), 0o755, nobody)
	link := symlink(t, realSock, filepath.Join(attacker, "containerd.sock"), nobody)
	_, err := TrustedDialer(link, os.Getpid())(context.Background(), "")
	if err == nil || !strings.Contains(err.Error(), "refusing containerd socket "+link) || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Fatalf("dial through the attacker's symlink: %v, want a refusal naming the path and the owner", err)
	}
}
