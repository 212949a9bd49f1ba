// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podsysctl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxSymlinks bounds the links TrustedSocketPath follows, as the kernel's
// own limit does for a path walk.
const maxSymlinks = 40

// TrustedSocketPath tells whether only root can change what path names:
// every component, symlinks and their targets included, is owned by root,
// and no directory on the way is writable by group or others unless it is
// sticky (as /tmp is: there only an entry's owner, root here, can replace
// it). The last component must be a socket. A local user who can write any
// directory on the way could swap the socket for one of their own.
func TrustedSocketPath(path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%q is not an absolute path", path)
	}
	return trustedWalk(filepath.Clean(path), 0)
}

func trustedWalk(path string, links int) error {
	var root unix.Stat_t
	if err := unix.Lstat("/", &root); err != nil {
		return fmt.Errorf("/: %w", err)
	}
	if root.Uid != 0 {
		return fmt.Errorf("/ is owned by uid %d, not root", root.Uid)
	}
	if err := trustedDir("/", root); err != nil {
		return err
	}
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	cur := "/"
	for i, name := range parts {
		next := filepath.Join(cur, name)
		last := i == len(parts)-1
		var st unix.Stat_t
		if err := unix.Lstat(next, &st); err != nil {
			return fmt.Errorf("%s: %w", next, err)
		}
		if st.Uid != 0 {
			return fmt.Errorf("%s is owned by uid %d, not root", next, st.Uid)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			if links == maxSymlinks {
				return fmt.Errorf("%s: more than %d symbolic links", path, maxSymlinks)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return fmt.Errorf("%s: %w", next, err)
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			return trustedWalk(filepath.Join(append([]string{target}, parts[i+1:]...)...), links+1)
		case unix.S_IFDIR:
			if last {
				return fmt.Errorf("%s is a directory, not a socket", next)
			}
			if err := trustedDir(next, st); err != nil {
				return err
			}
		case unix.S_IFSOCK:
			if !last {
				return fmt.Errorf("%s is a socket, not a directory", next)
			}
		default:
			return fmt.Errorf("%s is not a socket", next)
		}
		cur = next
	}
	return nil
}

// trustedDir checks a root-owned directory's mode, from its lstat:
// writable by group or others only when sticky.
func trustedDir(dir string, st unix.Stat_t) error {
	if st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
		return fmt.Errorf("%s is writable by group or others (mode %04o)", dir, st.Mode&0o7777)
	}
	return nil
}

// errPeer says who served a socket that was not to be trusted.
var errPeer = errors.New("the socket is not served by the expected process")

// checkPeer checks the peer of a unix connection: uid 0 always, and the
// process wantPID when it is not 0. SO_PEERCRED shows pid 0 for a peer
// outside this pid namespace: with wantPID set, such a peer is refused.
func checkPeer(conn net.Conn, wantPID int) error {
	cred, err := peerCred(conn)
	if err != nil {
		return err
	}
	if cred.Uid != 0 {
		return fmt.Errorf("%w: served by uid %d, not root", errPeer, cred.Uid)
	}
	if wantPID != 0 && int(cred.Pid) != wantPID {
		return fmt.Errorf("%w: served by pid %d, not %d (the process that started the plugin)", errPeer, cred.Pid, wantPID)
	}
	return nil
}

func peerCred(conn net.Conn) (*unix.Ucred, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return nil, fmt.Errorf("not a unix connection: %T", conn)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, credErr
}

// TrustedDialer dials path for every connection a gRPC client makes, and
// hands over only a connection whose path and peer can be trusted
// (TrustedDial): a socket swapped after an earlier check is caught at the
// next connection.
func TrustedDialer(path string, wantPID int) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, _ string) (net.Conn, error) {
		return TrustedDial(ctx, "containerd", path, wantPID)
	}
}

// TrustedDial dials the unix socket path, whose peer is named by kind in
// errors ("containerd", "NRI"), and hands over the connection only if its
// path is one only root can change (TrustedSocketPath) and its peer, read
// from the connection itself, is root (and the process wantPID, when not
// 0): a socket it cannot trust could hand the plugin pids and namespace
// paths to write into, or read the pods' sysctls.
func TrustedDial(ctx context.Context, kind, path string, wantPID int) (net.Conn, error) {
	if err := TrustedSocketPath(path); err != nil {
		return nil, fmt.Errorf("refusing %s socket %s: %w", kind, path, err)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	if err := checkPeer(conn, wantPID); err != nil {
		conn.Close()
		return nil, fmt.Errorf("refusing %s socket %s: %w", kind, path, err)
	}
	return conn, nil
}
