// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podsysctl

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"time"

	"golang.org/x/sys/unix"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// ListeningSockets finds the sockets a process listens on, gRPC-looking ones
// first, and leaves out sockets it only connected and those named like NRI's
// and ttrpc's, where no pod can be looked up.
func TestListeningSockets(t *testing.T) {
	dir := t.TempDir()
	var listeners []net.Listener
	for _, name := range []string{"nri.sock", "other.sock", "containerd.sock.ttrpc", "containerd.sock"} {
		l, err := net.Listen("unix", filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		listeners = append(listeners, l)
	}
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	client, err := net.Dial("unix", filepath.Join(dir, "other.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var got []string
	for _, p := range ListeningSockets(os.Getpid()) {
		if strings.HasPrefix(p, dir) {
			got = append(got, filepath.Base(p))
		}
	}
	want := []string{"containerd.sock", "other.sock"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("listening sockets %v, want %v", got, want)
	}
}

// fakeServerEnv makes the test binary a process that listens on the socket
// paths in the variable (a JSON list: a path may hold a newline) and
// waits to be killed: a local user's fake containerd.
const fakeServerEnv = "NRI_SYSCTL_TEST_FAKE_SOCKET_SERVER"

func TestMain(m *testing.M) {
	if paths := os.Getenv(fakeServerEnv); paths != "" {
		var list []string
		if err := json.Unmarshal([]byte(paths), &list); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for _, p := range list {
			if _, err := net.Listen("unix", p); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
		fmt.Println("listening")
		time.Sleep(time.Hour)
	}
	os.Exit(m.Run())
}

// /proc/net/unix prints paths as raw bytes, so another
// process can bind a path with a newline in it that forges a line naming the
// real server's socket inode and a socket of its own. That socket is served
// by another process, and must not be listed.
func TestListeningSocketsRefusesAForgedLine(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "ps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	served, err := net.Listen("unix", filepath.Join(dir, "r.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer served.Close()
	f, err := served.(*net.UnixListener).File()
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	f.Close()
	fake := filepath.Join(dir, "f.sock")
	forged := filepath.Join(dir, "x") + fmt.Sprintf("\n0000000000000000: 00000002 00000000 00010000 0001 01 %d %s", st.Ino, fake)
	// The slashes of the forged path make directories, which the forger
	// makes too.
	if err := os.MkdirAll(filepath.Dir(forged), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	paths, _ := json.Marshal([]string{fake, forged})
	cmd.Env = append(os.Environ(), fakeServerEnv+"="+string(paths))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "listening\n" {
		t.Fatalf("fake server: %q, %v", line, err)
	}
	// The forgery works on the text: the fake path is named for this
	// process's socket inode.
	if named := socketsNamedFor(os.Getpid()); !slices.Contains(named, fake) {
		t.Fatalf("the forged line is not in /proc/net/unix as the test expects: %v", named)
	}
	var got []string
	for _, p := range ListeningSockets(os.Getpid()) {
		if strings.HasPrefix(p, dir) {
			got = append(got, p)
		}
	}
	if want := []string{filepath.Join(dir, "r.sock")}; !reflect.DeepEqual(got, want) {
		t.Fatalf("listening sockets %v, want %v (the fake one is served by pid %d)", got, want, cmd.Process.Pid)
	}
}
