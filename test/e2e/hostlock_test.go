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

// Locks between e2e runs on one machine, which make e2e has by running two
// containerd lines at once (test/e2e.sh). Each is an flock on a file in
// runsBaseDir, so a run that dies releases it; one process holds each at
// most once (tests run one at a time; a subtest's hold is its parent's).
//
// hostLock: what every run shares, the host's sysctls, /dev/log
// (listenSyslog) and the default pod state directory of a pre-installed
// plugin (defaultPodStateParent). A test that writes one of them holds it
// exclusively for as long as it runs; a test that compares the host's
// values holds it shared. hostSysctl fails a test that holds neither, so
// that a new comparison cannot forget it.
var hostLock = &runLock{file: "host.lock"}

// burstLock: a burst of pods against containerd's 2 s deadline for the
// plugin (TestConcurrentPods, TestPluginKilledDuringBurst) runs alone, not
// beside another run's: two bursts at once on two cores are a different
// load than the test means.
var burstLock = &runLock{file: "burst.lock"}

type runLock struct {
	file string // in runsBaseDir

	mu        sync.Mutex
	f         *os.File
	holds     int
	exclusive bool
}

// hold takes the lock for t's run (exclusive to write, shared to compare);
// it is released when t ends.
func (l *runLock) hold(t *testing.T, exclusive bool) {
	t.Helper()
	release, err := l.lock(exclusive)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
}

// lock takes the lock and returns its release.
func (l *runLock) lock(exclusive bool) (func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holds > 0 {
		if exclusive && !l.exclusive {
			return nil, fmt.Errorf("test bug: %s is held shared; take it exclusively from the start", l.file)
		}
		l.holds++
		return l.release, nil
	}
	if err := os.MkdirAll(runsBaseDir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(runsBaseDir, l.file)
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
	l.f, l.holds, l.exclusive = f, 1, exclusive
	return l.release, nil
}

func flockRetry(fd, how int) error {
	for {
		err := syscall.Flock(fd, how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

func (l *runLock) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.holds--
	if l.holds == 0 {
		l.f.Close() // releases the flock
		l.f = nil
	}
}

// held says whether this process holds the lock, exclusively if exclusive.
func (l *runLock) held(exclusive bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holds > 0 && (l.exclusive || !exclusive)
}

// hostSysctl reads a sysctl of the host (the test process's namespaces),
// under the host lock.
func hostSysctl(t *testing.T, key string) string {
	t.Helper()
	if !hostLock.held(false) {
		t.Fatalf("test bug: %s reads the host's %s without hostLock.hold: another run may change it meanwhile", t.Name(), key)
	}
	v, err := readHostSysctl(key)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// readHostSysctl reads a sysctl of the host; the caller holds hostLock.
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
		f, err := os.OpenFile(filepath.Join(runsBaseDir, hostLock.file), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
	}
	t.Run("shared", func(t *testing.T) {
		hostLock.hold(t, false)
		if err := other(syscall.LOCK_SH); err != nil {
			t.Errorf("another run's shared hold: %v, want it admitted", err)
		}
		if err := other(syscall.LOCK_EX); !errors.Is(err, syscall.EWOULDBLOCK) {
			t.Errorf("another run's exclusive hold: %v, want EWOULDBLOCK", err)
		}
		if _, err := hostLock.lock(true); err == nil {
			t.Error("taking it exclusively while held shared: no error")
		}
	})
	t.Run("exclusive", func(t *testing.T) {
		hostLock.hold(t, true)
		if err := other(syscall.LOCK_SH); !errors.Is(err, syscall.EWOULDBLOCK) {
			t.Errorf("another run's shared hold: %v, want EWOULDBLOCK", err)
		}
		hostLock.hold(t, false) // a subtest's hold within its parent's
		if !hostLock.held(true) {
			t.Error("not held exclusively")
		}
	})
	// (Not checked from another description: another run may hold it now.)
	if hostLock.held(false) || hostLock.f != nil {
		t.Error("still held after the subtests ended")
	}
}

// hostValuesNow reads the host's keys under the host lock, shared for the
// reads alone where the test does not hold it: another run's
// TestInheritFromHost sets keepalive values for a while.
func hostValuesNow(t *testing.T, keys []string) map[string]string {
	t.Helper()
	if !hostLock.held(false) {
		release, err := hostLock.lock(false)
		if err != nil {
			t.Fatal(err)
		}
		defer release()
	}
	values := map[string]string{}
	for _, k := range keys {
		v, err := readHostSysctl(k)
		if err != nil {
			t.Fatal(err)
		}
		values[k] = v
	}
	return values
}
