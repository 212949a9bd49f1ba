// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package podstate keeps, per pod, what the plugin wrote into the pod's
// namespaces and what was there before (converge.Written), so that after a
// restart the plugin still tells its own values from another writer's.
// One small file per pod in a directory only root can change (by default
// on /run, a tmpfs: gone at reboot, with the pods). Files are written
// whole or not at all, and not synced (the machine's restart ends the pods
// they describe), and read as strictly as the config: a file that is
// not root's, too large, or holds an unknown field, a bad key or a bad
// value is refused with its path and the reason, never half-read.
package podstate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/nri-sysctl/nri-sysctl/pkg/atomicfile"
	"github.com/nri-sysctl/nri-sysctl/pkg/converge"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// DefaultDir is where the plugin keeps pod state unless told otherwise.
const DefaultDir = "/run/nri-sysctl/pods"

const (
	// formatVersion is the file format's version; another is refused.
	formatVersion = 1
	// maxFileSize bounds one pod's file: a pod's managed keys are a few
	// dozen, each a short name and two short values.
	maxFileSize = 64 << 10
	// maxKeys bounds the keys one file may hold.
	maxKeys = 512
	suffix  = ".json"
)

// podIDPattern is what a pod ID may be to name a file: containerd's are 64
// hex digits; nothing with a slash or a dot.
var podIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// Store is a directory of pod state files, and what it last read from
// or wrote to each: the plugin is the directory's only writer, so a
// convergence pass need not read back every pod's file (a tenth of its
// CPU time where the directory is on a disk). Safe for concurrent use.
type Store struct {
	dir string
	// mu guards known; it is a leaf (Prune calls its keep under it, so
	// keep must take no lock).
	mu sync.Mutex
	// known holds, per pod, its state as last read or written (empty for
	// a pod without a file).
	known map[string]map[string]converge.Written
}

// remember keeps a copy of keys as the pod's state.
func (s *Store) remember(podID string, keys map[string]converge.Written) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.known == nil {
		s.known = map[string]map[string]converge.Written{}
	}
	s.known[podID] = maps.Clone(keys)
}

// recalled is a copy of the pod's state as last read or written.
func (s *Store) recalled(podID string) (map[string]converge.Written, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys, ok := s.known[podID]
	if !ok {
		return nil, false
	}
	if keys == nil {
		keys = map[string]converge.Written{}
	}
	return maps.Clone(keys), true
}

// forget drops what the store holds of the pod.
func (s *Store) forget(podID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.known, podID)
}

// file is a pod's state on disk.
type file struct {
	Version int              `json:"version"`
	Pod     string           `json:"pod"`
	Keys    map[string]entry `json:"keys"`
}

// entry is one key; a value absent is unknown.
type entry struct {
	Set    *string `json:"set,omitempty"`
	Before *string `json:"before,omitempty"`
}

// Open makes dir (mode 0700) if it is missing, and refuses it unless it is
// a directory of this user's (root's, for the plugin), not a symlink, that
// no group or other user can write.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pod state directory %s: %w", dir, err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return nil, fmt.Errorf("pod state directory %s: %w", dir, err)
	}
	if err := ownedByUs(&st, syscall.S_IFDIR, "a directory (a symlink is refused)"); err != nil {
		return nil, fmt.Errorf("pod state directory %s: %w", dir, err)
	}
	return &Store{dir: dir}, nil
}

func (s *Store) path(podID string) (string, error) {
	if !podIDPattern.MatchString(podID) {
		return "", fmt.Errorf("pod ID %q cannot name a state file", podID)
	}
	return filepath.Join(s.dir, podID+suffix), nil
}

// Save writes a pod's state whole, or removes its file when nothing is
// left to remember. A key it cannot keep (a name or value the plugin
// never writes) is left out and named in the error; the others are kept.
func (s *Store) Save(podID string, keys map[string]converge.Written) error {
	path, err := s.path(podID)
	if err != nil {
		return err
	}
	f := file{Version: formatVersion, Pod: podID, Keys: map[string]entry{}}
	var refused []error
	for _, name := range slices.Sorted(maps.Keys(keys)) {
		w := keys[name]
		var e entry
		if w.HasSet {
			e.Set = &w.Set
		}
		if w.HasBefore {
			e.Before = &w.Before
		}
		if e.Set == nil && e.Before == nil {
			continue
		}
		if err := e.check(name); err != nil {
			refused = append(refused, err)
			continue
		}
		f.Keys[name] = e
	}
	if err := s.write(path, podID, f); err != nil {
		return err
	}
	if len(refused) > 0 {
		return fmt.Errorf("%s: not kept: %w", path, errors.Join(refused...))
	}
	return nil
}

// write writes f as the pod's file, or removes the file when f is empty.
func (s *Store) write(path, podID string, f file) error {
	if len(f.Keys) == 0 {
		if err := s.Remove(podID); err != nil {
			return err
		}
		s.remember(podID, nil)
		return nil
	}
	if err := f.check(); err != nil {
		return fmt.Errorf("%s: not written: %w", path, err)
	}
	text, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if len(text) > maxFileSize {
		return fmt.Errorf("%s: not written: %d bytes, more than %d", path, len(text), maxFileSize)
	}
	if err := atomicfile.WriteVolatile(path, append(text, '\n'), 0o600); err != nil {
		s.forget(podID) // the file may hold either
		return err
	}
	s.remember(podID, f.written())
	return nil
}

// Load reads a pod's state, from its file the first time; a pod without
// a file has none (an empty map).
func (s *Store) Load(podID string) (map[string]converge.Written, error) {
	path, err := s.path(podID)
	if err != nil {
		return nil, err
	}
	if keys, ok := s.recalled(podID); ok {
		return keys, nil
	}
	text, err := readOwn(path)
	if errors.Is(err, os.ErrNotExist) {
		s.remember(podID, nil)
		return map[string]converge.Written{}, nil
	}
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	var f file
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: more than one JSON value", path)
	}
	if f.Pod != podID {
		return nil, fmt.Errorf("%s: holds pod %q, not %q", path, f.Pod, podID)
	}
	if err := f.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	keys := f.written()
	s.remember(podID, keys)
	return keys, nil
}

// written is the file's keys as the convergence holds them.
func (f *file) written() map[string]converge.Written {
	keys := make(map[string]converge.Written, len(f.Keys))
	for name, e := range f.Keys {
		var w converge.Written
		if e.Set != nil {
			w.Set, w.HasSet = *e.Set, true
		}
		if e.Before != nil {
			w.Before, w.HasBefore = *e.Before, true
		}
		keys[name] = w
	}
	return keys
}

// Remove forgets a pod; a pod without a file is no error.
func (s *Store) Remove(podID string) error {
	path, err := s.path(podID)
	if err != nil {
		return err
	}
	s.forget(podID)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Prune removes the files of pods keep does not name (the pods Synchronize
// did not list), and returns the pod IDs removed, sorted. Files that are
// not pod state (other names, temporary files of a write cut short) are
// removed too: the directory is the plugin's alone.
func (s *Store) Prune(keep func(podID string) bool) ([]string, error) {
	s.mu.Lock()
	maps.DeleteFunc(s.known, func(podID string, _ map[string]converge.Written) bool { return !keep(podID) })
	s.mu.Unlock()
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		podID, isState := strings.CutSuffix(e.Name(), suffix)
		if isState && podIDPattern.MatchString(podID) && keep(podID) {
			continue
		}
		if err := os.Remove(filepath.Join(s.dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		if isState {
			removed = append(removed, podID)
		}
	}
	sort.Strings(removed)
	return removed, errors.Join(errs...)
}

// check refuses what the plugin would never have written.
func (f *file) check() error {
	if f.Version != formatVersion {
		return fmt.Errorf("format version %d, want %d", f.Version, formatVersion)
	}
	if len(f.Keys) > maxKeys {
		return fmt.Errorf("%d keys, more than %d", len(f.Keys), maxKeys)
	}
	for name, e := range f.Keys {
		if err := e.check(name); err != nil {
			return err
		}
	}
	return nil
}

// check refuses a key the plugin never writes, and a value no namespaced
// key holds (one line, as the plugin reads it). Every value it holds is
// kept: the empty one (an empty list), and ones with commas, spaces or
// tabs.
func (e entry) check(name string) error {
	if err := sysctl.ValidateNamespaced(name); err != nil {
		return fmt.Errorf("key %q: %w", name, err)
	}
	if e.Set == nil && e.Before == nil {
		return fmt.Errorf("key %q: neither set nor before", name)
	}
	for _, v := range []*string{e.Set, e.Before} {
		switch {
		case v == nil:
		case strings.ContainsRune(*v, 0):
			return fmt.Errorf("key %q: value contains a NUL byte", name)
		case strings.ContainsAny(*v, "\n\r"):
			return fmt.Errorf("key %q: value contains a newline", name)
		case len(*v) > sysctl.MaxValueLen:
			return fmt.Errorf("key %q: value is %d bytes long; the kernel holds at most %d", name, len(*v), sysctl.MaxValueLen)
		}
	}
	return nil
}

// readOwn reads path if it is a regular file of this user's that no group
// or other user can write, of at most maxFileSize bytes; it follows no
// symlink and does not block on a FIFO.
func readOwn(path string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return nil, os.ErrNotExist
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := ownedByUs(&st, syscall.S_IFREG, "a regular file"); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if st.Size > maxFileSize {
		return nil, fmt.Errorf("%s: %d bytes, more than %d", path, st.Size, maxFileSize)
	}
	text, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(text) > maxFileSize {
		return nil, fmt.Errorf("%s: more than %d bytes", path, maxFileSize)
	}
	return text, nil
}

// ownedByUs refuses a file that is not of the type wanted, not this user's
// (root's, for the plugin), or that a group or other user could write:
// only the plugin's user may write what it trusts.
func ownedByUs(st *syscall.Stat_t, fileType uint32, what string) error {
	switch {
	case st.Mode&syscall.S_IFMT != fileType:
		return fmt.Errorf("not %s", what)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("owned by uid %d, not %d", st.Uid, os.Geteuid())
	case st.Mode&0o022 != 0:
		return fmt.Errorf("mode %o lets others write it: chmod go-w", st.Mode&0o777)
	}
	return nil
}
