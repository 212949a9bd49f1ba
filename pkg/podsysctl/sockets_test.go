package podsysctl

import (
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// ListeningSockets finds the sockets a process listens on, gRPC-looking ones
// first, and leaves out sockets it only connected.
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
	want := []string{"containerd.sock", "other.sock", "nri.sock", "containerd.sock.ttrpc"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("listening sockets %v, want %v", got, want)
	}
}
