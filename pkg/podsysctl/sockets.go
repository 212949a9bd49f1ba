// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podsysctl

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ListeningSockets lists the unix sockets the process pid listens on, from
// its open fds and /proc/net/unix: where a containerd that launched the
// plugin (pre-installed, under any socket path) can be looked up. Names
// like containerd's gRPC socket come first. /proc/net/unix prints a path
// as raw bytes, so a path with a newline in it, bound by anyone, can forge
// a line naming pid's socket inode and a socket of its own: a path is
// listed only when the process serving it is pid itself (SO_PEERCRED).
// Sockets named like NRI's or ttrpc's are left out: no pod can be looked
// up there, and a bare connection to NRI's socket reads to containerd as a
// plugin failing to register.
func ListeningSockets(pid int) []string {
	var out []string
	for _, path := range socketsNamedFor(pid) {
		if socketRank(path) <= 1 && servedBy(path, pid) {
			out = append(out, path)
		}
	}
	return out
}

// peerCheckTimeout bounds the connection that asks who serves a socket.
const peerCheckTimeout = time.Second

// servedBy tells whether the process listening on the unix socket at path
// is pid, from the peer credentials of a connection to it.
func servedBy(path string, pid int) bool {
	conn, err := net.DialTimeout("unix", path, peerCheckTimeout)
	if err != nil {
		return false
	}
	defer conn.Close()
	cred, err := peerCred(conn)
	return err == nil && int(cred.Pid) == pid
}

// socketsNamedFor lists, ranked, the paths /proc/net/unix names for the
// listening sockets among pid's fds; the text is not to be trusted.
func socketsNamedFor(pid int) []string {
	inodes := map[string]bool{}
	fdDir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	entries, _ := os.ReadDir(fdDir)
	for _, e := range entries {
		link, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return nil
	}
	defer f.Close()
	var paths []string
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		// Num RefCount Protocol Flags Type St Inode Path
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 || !inodes[fields[6]] || !strings.HasPrefix(fields[7], "/") {
			continue
		}
		const acceptConn = 0x10000 // __SO_ACCEPTCON: a listening socket
		if flags, err := strconv.ParseUint(fields[3], 16, 32); err != nil || flags&acceptConn == 0 {
			continue
		}
		if !slices.Contains(paths, fields[7]) {
			paths = append(paths, fields[7])
		}
	}
	slices.SortStableFunc(paths, func(a, b string) int { return socketRank(a) - socketRank(b) })
	return paths
}

func socketRank(path string) int {
	switch base := filepath.Base(path); {
	case strings.HasSuffix(base, "containerd.sock"):
		return 0
	case strings.Contains(base, "nri"):
		return 2
	case strings.HasSuffix(base, ".ttrpc"):
		return 3
	}
	return 1
}
