// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podstate

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/converge"
)

const podID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func openStore(t *testing.T) (*Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pods")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

// reopen is the store of dir as a restarted plugin opens it: every file
// is read from the disk.
func reopen(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSaveThenLoad(t *testing.T) {
	s, dir := openStore(t)
	want := map[string]converge.Written{
		"net.ipv4.tcp_keepalive_time": {Set: "600", HasSet: true, Before: "7200", HasBefore: true},
		"net.ipv4.tcp_rmem":           {Set: "4096 131072 6291456", HasSet: true},
		"kernel.shmmni":               {Before: "4096", HasBefore: true},
	}
	if err := s.Save(podID, want); err != nil {
		t.Fatal(err)
	}
	// From what the store wrote, and from the file, as after a restart.
	for _, from := range []*Store{s, reopen(t, dir)} {
		got, err := from.Load(podID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("loaded %+v, want %+v", got, want)
		}
	}
	info, err := os.Stat(filepath.Join(dir, podID+".json"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("state file mode %v (%v), want 0600", info.Mode(), err)
	}
}

// Every value the kernel holds is kept: the empty one (a fresh
// namespace's ip_local_reserved_ports), lists with commas, spaces and
// tabs.
func TestSaveKeepsEveryValueTheKernelHolds(t *testing.T) {
	s, dir := openStore(t)
	want := map[string]converge.Written{
		"net.ipv4.ip_local_reserved_ports": {Set: "30000-30010,31000", HasSet: true, Before: "", HasBefore: true},
		"net.ipv4.ping_group_range":        {Set: "0\t2147483647", HasSet: true, Before: "1\t0", HasBefore: true},
		"kernel.domainname":                {Set: " spaced out ", HasSet: true, Before: "(none)", HasBefore: true},
	}
	if err := s.Save(podID, want); err != nil {
		t.Fatal(err)
	}
	got, err := reopen(t, dir).Load(podID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("loaded %+v, want %+v", got, want)
	}
}

// A key the store cannot keep is named in the error and costs only
// itself: the pod's other keys are kept.
func TestSaveKeepsTheOtherKeysOfOneItCannot(t *testing.T) {
	s, dir := openStore(t)
	good := map[string]converge.Written{"net.ipv4.tcp_keepalive_time": {Set: "600", HasSet: true, Before: "7200", HasBefore: true}}
	keys := map[string]converge.Written{"kernel.msgmax": {Set: "1\x002", HasSet: true}}
	for k, w := range good {
		keys[k] = w
	}
	err := s.Save(podID, keys)
	if err == nil || !strings.Contains(err.Error(), `key "kernel.msgmax": value contains a NUL byte`) || !strings.Contains(err.Error(), podID+".json") {
		t.Errorf("Save with one bad key: %v, want an error naming the file, the key and the reason", err)
	}
	got, lerr := reopen(t, dir).Load(podID)
	if lerr != nil || !reflect.DeepEqual(got, good) {
		t.Errorf("after a Save with one bad key: %+v, %v; want the other keys %+v", got, lerr, good)
	}
}

func TestLoadOfAPodWithoutStateIsEmpty(t *testing.T) {
	s, _ := openStore(t)
	got, err := s.Load(podID)
	if err != nil || len(got) != 0 {
		t.Fatalf("Load of a pod never saved: %v, %v; want empty", got, err)
	}
}

func TestSavingNothingRemovesTheFile(t *testing.T) {
	s, dir := openStore(t)
	if err := s.Save(podID, map[string]converge.Written{"kernel.shmmni": {Set: "8192", HasSet: true}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(podID, map[string]converge.Written{"kernel.shmmni": {}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, podID+".json")); !os.IsNotExist(err) {
		t.Errorf("the file of a pod with nothing to remember is still there (%v)", err)
	}
}

// Each file below is one the plugin would never write; Load refuses it
// whole, naming the file and the reason.
func TestLoadRefuses(t *testing.T) {
	good := `{"version": 1, "pod": "` + podID + `", "keys": {"kernel.shmmni": {"set": "8192"}}}`
	for _, tc := range []struct {
		name, text, reason string
	}{
		{"an unknown field", strings.Replace(good, `"set"`, `"sett"`, 1), `unknown field "sett"`},
		{"another format version", strings.Replace(good, `"version": 1`, `"version": 2`, 1), "format version 2, want 1"},
		{"another pod's state", strings.Replace(good, podID, "other", 1), `holds pod "other"`},
		{"a key that is not namespaced", strings.Replace(good, "kernel.shmmni", "vm.swappiness", 1), `key "vm.swappiness"`},
		{"a key that names a path", strings.Replace(good, "kernel.shmmni", "../../etc/passwd", 1), `key "../../etc/passwd"`},
		{"a value with a newline", strings.Replace(good, `"8192"`, `"8192\n1"`, 1), `key "kernel.shmmni"`},
		{"a key with neither value", strings.Replace(good, `{"set": "8192"}`, `{}`, 1), "neither set nor before"},
		{"two values", good + good, "more than one JSON value"},
		{"too large", good + strings.Repeat(" ", maxFileSize), "more than 65536"},
		{"not JSON", "set: 8192", "invalid character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, dir := openStore(t)
			path := filepath.Join(dir, podID+".json")
			if err := os.WriteFile(path, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := s.Load(podID)
			if err == nil {
				t.Fatalf("loaded %+v", got)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("error %q does not name %s and %q", err, path, tc.reason)
			}
		})
	}
}

func TestLoadRefusesAFileOthersCouldHaveWritten(t *testing.T) {
	s, dir := openStore(t)
	path := filepath.Join(dir, podID+".json")
	if err := s.Save(podID, map[string]converge.Written{"kernel.shmmni": {Set: "8192", HasSet: true}}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o622); err != nil {
		t.Fatal(err)
	}
	if _, err := reopen(t, dir).Load(podID); err == nil || !strings.Contains(err.Error(), "lets others write it") {
		t.Errorf("a group-writable state file: %v", err)
	}
}

func TestLoadFollowsNoSymlinkAndWaitsOnNoFIFO(t *testing.T) {
	s, dir := openStore(t)
	path := filepath.Join(dir, podID+".json")
	elsewhere := filepath.Join(t.TempDir(), "x.json")
	if err := os.WriteFile(elsewhere, []byte(`{"version": 1, "pod": "`+podID+`", "keys": {"kernel.shmmni": {"set": "8192"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, path); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(podID); err == nil {
		t.Error("a state file that is a symlink was read")
	}
	os.Remove(path)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(podID); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a FIFO: %v", err)
	}
}

func TestPodIDsThatCannotNameAFile(t *testing.T) {
	s, _ := openStore(t)
	for _, id := range []string{"", "../x", "a/b", ".", strings.Repeat("a", 129)} {
		if err := s.Save(id, map[string]converge.Written{"kernel.shmmni": {Set: "1", HasSet: true}}); err == nil {
			t.Errorf("Save(%q) succeeded", id)
		}
		if _, err := s.Load(id); err == nil {
			t.Errorf("Load(%q) succeeded", id)
		}
	}
}

func TestPruneKeepsOnlyListedPods(t *testing.T) {
	s, dir := openStore(t)
	w := map[string]converge.Written{"kernel.shmmni": {Set: "8192", HasSet: true}}
	for _, id := range []string{"running", "gone-1", "gone-2"} {
		if err := s.Save(id, w); err != nil {
			t.Fatal(err)
		}
	}
	// What a write cut short leaves, and a stranger.
	for _, name := range []string{".running.json.tmp-123", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := s.Prune(func(id string) bool { return id == "running" })
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"gone-1", "gone-2"}; !reflect.DeepEqual(removed, want) {
		t.Errorf("pruned %v, want %v", removed, want)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "running.json" {
		t.Errorf("left %v, want running.json alone", entries)
	}
}

// A pass reads no file the store wrote or read already; a pod removed or
// pruned is read from its file again.
func TestLoadReadsEachFileOnce(t *testing.T) {
	s, dir := openStore(t)
	path := filepath.Join(dir, podID+".json")
	saved := map[string]converge.Written{"kernel.shmmni": {Set: "8192", HasSet: true}}
	if err := s.Save(podID, saved); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(`{"version": 1, "pod": "`+podID+`", "keys": {"kernel.shmmni": {"set": "9000"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Load(podID); err != nil || !reflect.DeepEqual(got, saved) {
		t.Errorf("Load after Save: %+v, %v; want what was saved, %+v", got, err, saved)
	}
	got, err := s.Load(podID)
	if err != nil {
		t.Fatal(err)
	}
	got["kernel.msgmax"] = converge.Written{Set: "1", HasSet: true}
	if again, _ := s.Load(podID); !reflect.DeepEqual(again, saved) {
		t.Errorf("a change to what Load returned reached the store: %+v", again)
	}
	fromFile := map[string]converge.Written{"kernel.shmmni": {Set: "9000", HasSet: true}}
	restarted := reopen(t, dir)
	if got, err := restarted.Load(podID); err != nil || !reflect.DeepEqual(got, fromFile) {
		t.Errorf("Load after a restart: %+v, %v; want the file's, %+v", got, err, fromFile)
	}
	// What a store read, it holds too.
	if err := os.WriteFile(path, []byte(`{"version": 1, "pod": "`+podID+`", "keys": {"kernel.shmmni": {"set": "9100"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := restarted.Load(podID); err != nil || !reflect.DeepEqual(got, fromFile) {
		t.Errorf("second Load after a restart: %+v, %v; want what the first read, %+v", got, err, fromFile)
	}
	for _, drop := range []func() error{
		func() error { return s.Remove(podID) },
		func() error { _, err := s.Prune(func(string) bool { return false }); return err },
	} {
		if err := s.Save(podID, saved); err != nil {
			t.Fatal(err)
		}
		if err := drop(); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Load(podID); err != nil || len(got) != 0 {
			t.Errorf("Load of a pod dropped: %+v, %v; want empty", got, err)
		}
	}

	// A write that failed leaves the file as it may be: the next Load
	// reads it (here a directory in its place, refused).
	if err := s.Save(podID, saved); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "in-the-way"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(podID, fromFile); err == nil {
		t.Fatal("Save over a directory succeeded")
	}
	if got, err := s.Load(podID); err == nil {
		t.Errorf("Load after a failed Save: %+v from memory, want the file read (and refused)", got)
	}
}

func TestOpenRefusesADirectoryOthersCanWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pods")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "chmod go-w") {
		t.Errorf("a world-writable directory: %v", err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(link); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("a symlink to a directory: %v", err)
	}
}
