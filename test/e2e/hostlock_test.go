// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// The host lock: what every e2e run on one machine shares, which make e2e
// uses by running two containerd lines at once (test/e2e-lines.sh): the
// host's sysctls, /dev/log (listenSyslog) and the default pod state
// directory of a pre-installed plugin (defaultPodStateParent). A test that
// writes one of them holds the lock exclusively for as long as it runs; a
// test that compares the host's values holds it shared. It is an flock on
// one file, so a run that dies releases it. hostSysctl fails a test that
// holds neither, so that a new comparison cannot forget it.
//
// One process holds it at most once (tests run one at a time; subtests use
// their parent's hold).
var hostLock struct {
	mu        sync.Mutex
	file      *os.File
	holds     int
	exclusive bool
}

const hostLockFile = "host.lock" // in runsBaseDir

// holdHost takes the host lock for t's run (exclusive to write, shared to
// compare); it is released when t ends.
func holdHost(t *testing.T, exclusive bool) {
	t.Helper()
	release, err := lockHost(exclusive)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
}

// lockHost takes the host lock and returns its release.
func lockHost(exclusive bool) (func(), error) {
	hostLock.mu.Lock()
	defer hostLock.mu.Unlock()
	if hostLock.holds > 0 {
		if exclusive && !hostLock.exclusive {
			return nil, fmt.Errorf("test bug: the host lock is held shared; take it exclusively from the start")
		}
		hostLock.holds++
		return releaseHost, nil
	}
	if err := os.MkdirAll(runsBaseDir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(runsBaseDir, hostLockFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	if err := flockRetry(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	hostLock.file, hostLock.holds, hostLock.exclusive = f, 1, exclusive
	return releaseHost, nil
}

func flockRetry(fd, how int) error {
	for {
		err := syscall.Flock(fd, how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

func releaseHost() {
	hostLock.mu.Lock()
	defer hostLock.mu.Unlock()
	hostLock.holds--
	if hostLock.holds == 0 {
		hostLock.file.Close() // releases the flock
		hostLock.file = nil
	}
}

// holdsHost says whether this process holds the host lock, exclusively if
// exclusive.
func holdsHost(exclusive bool) bool {
	hostLock.mu.Lock()
	defer hostLock.mu.Unlock()
	return hostLock.holds > 0 && (hostLock.exclusive || !exclusive)
}

// hostSysctl reads a sysctl of the host (the test process's namespaces),
// under the host lock.
func hostSysctl(t *testing.T, key string) string {
	t.Helper()
	if !holdsHost(false) {
		t.Fatalf("test bug: %s reads the host's %s without holdHost: another run may change it meanwhile", t.Name(), key)
	}
	v, err := readHostSysctl(key)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// readHostSysctl reads a sysctl of the host without the lock: only for a
// check of a test's own values against the host's, where a value another
// run set for a moment can only make the check fail loudly.
func readHostSysctl(key string) (string, error) {
	data, err := os.ReadFile(filepath.Join("/proc/sys", sysctlPath(key)))
	if err != nil {
		return "", fmt.Errorf("read host sysctl %s: %w", key, err)
	}
	return strings.TrimSpace(string(data)), nil
}

// TestHostLock: shared holds admit each other and keep out an exclusive
// one, as another run's lock file description would see them, and a hold
// ends with its test.
func TestHostLock(t *testing.T) {
	getCluster(t) // skips where e2e runs cannot (not root)
	other := func(how int) error {
		f, err := os.OpenFile(filepath.Join(runsBaseDir, hostLockFile), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
	}
	t.Run("shared", func(t *testing.T) {
		holdHost(t, false)
		if err := other(syscall.LOCK_SH); err != nil {
			t.Errorf("another run's shared hold: %v, want it admitted", err)
		}
		if err := other(syscall.LOCK_EX); !errors.Is(err, syscall.EWOULDBLOCK) {
			t.Errorf("another run's exclusive hold: %v, want EWOULDBLOCK", err)
		}
		if _, err := lockHost(true); err == nil {
			t.Error("taking it exclusively while held shared: no error")
		}
	})
	t.Run("exclusive", func(t *testing.T) {
		holdHost(t, true)
		if err := other(syscall.LOCK_SH); !errors.Is(err, syscall.EWOULDBLOCK) {
			t.Errorf("another run's shared hold: %v, want EWOULDBLOCK", err)
		}
		holdHost(t, false) // a subtest's hold within its parent's
		if !holdsHost(true) {
			t.Error("not held exclusively")
		}
	})
	// (Not checked from another description: another run may hold it now.)
	if holdsHost(false) || hostLock.file != nil {
		t.Error("still held after the subtests ended")
	}
}
