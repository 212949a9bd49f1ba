package podsysctl

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ListeningSockets lists the unix sockets the process pid listens on, from
// its open fds and /proc/net/unix: where a containerd that launched the
// plugin (pre-installed, under any socket path) can be looked up. Names
// like containerd's gRPC socket come first, its NRI and ttrpc sockets last.
func ListeningSockets(pid int) []string {
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
