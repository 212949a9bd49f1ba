// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package nsthread

import (
	"os"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// The main goroutine keeps the main thread, so that a test can run code on
// it (see onMainThread); m.Run runs on another goroutine.
func init() { runtime.LockOSThread() }

var mainThread = make(chan func())

func TestMain(m *testing.M) {
	exit := make(chan int)
	go func() { exit <- m.Run() }()
	for {
		select {
		case f := <-mainThread:
			f()
		case code := <-exit:
			os.Exit(code)
		}
	}
}

func onMainThread(f func()) {
	done := make(chan struct{})
	mainThread <- func() { defer close(done); f() }
	<-done
}

func ownNamespaces(t *testing.T) (net, uts string) {
	t.Helper()
	net, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	uts, _ = os.Readlink("/proc/thread-self/ns/uts")
	return net, uts
}

// Run from the main thread: Go cannot end that thread and would park it for
// good in the namespaces fn entered, so Run must hand fn to another thread.
func TestRunFromMainThreadLeavesItAlone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("unshare needs root")
	}
	var tid, pid int
	var beforeNet, afterNet, beforeUTS, afterUTS, insideNet string
	var fnTid int
	onMainThread(func() {
		tid, pid = unix.Gettid(), unix.Getpid()
		beforeNet, beforeUTS = ownNamespaces(t)
		Run(func() {
			fnTid = unix.Gettid()
			if err := unix.Unshare(unix.CLONE_NEWNET | unix.CLONE_NEWUTS); err != nil {
				t.Errorf("unshare: %v", err)
			}
			insideNet, _ = os.Readlink("/proc/thread-self/ns/net")
		})
		afterNet, afterUTS = ownNamespaces(t)
	})
	if tid != pid {
		t.Fatalf("test harness: main-thread function ran on thread %d, not %d", tid, pid)
	}
	if fnTid == pid {
		t.Fatal("fn ran on the main thread")
	}
	if insideNet == beforeNet {
		t.Fatal("fn did not get a new network namespace; the test proves nothing")
	}
	if afterNet != beforeNet || afterUTS != beforeUTS {
		t.Fatalf("main thread namespaces changed: net %s -> %s, uts %s -> %s", beforeNet, afterNet, beforeUTS, afterUTS)
	}
}

// From any other goroutine the thread fn ran on is ended, so a later
// goroutine never finds itself in fn's namespaces.
func TestRunThreadIsThrownAway(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("unshare needs root")
	}
	before, _ := ownNamespaces(t)
	var fnTid int
	Run(func() {
		fnTid = unix.Gettid()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
		}
	})
	// The thread exits asynchronously; once gone, its /proc entry is too.
	for i := 0; i < 1000; i++ {
		if _, err := os.Stat("/proc/self/task/" + itoa(fnTid)); os.IsNotExist(err) {
			break
		}
		runtime.Gosched()
		unix.Nanosleep(&unix.Timespec{Nsec: 5e6}, nil)
	}
	if _, err := os.Stat("/proc/self/task/" + itoa(fnTid)); err == nil {
		t.Fatalf("thread %d that entered a new netns still exists", fnTid)
	}
	if after, _ := ownNamespaces(t); after != before {
		t.Fatalf("caller's netns changed: %s -> %s", before, after)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// Background work runs at the lowest priority, and so do the namespace
// threads it asks Run for; the caller's thread and Run's other callers
// keep theirs.
func TestBackgroundRunsAtTheLowestPriority(t *testing.T) {
	var outer, inner, innerTid, outerTid int
	Background(func() {
		outer, outerTid = threadNice(), unix.Gettid()
		Run(func() { inner, innerTid = threadNice(), unix.Gettid() })
	})
	if outer != BackgroundNice || inner != BackgroundNice {
		t.Errorf("nice: Background's thread %d, its Run's thread %d; want %d for both", outer, inner, BackgroundNice)
	}
	if innerTid == outerTid {
		t.Errorf("Run inside Background ran on Background's own thread %d", outerTid)
	}
	var plain int
	Run(func() { plain = threadNice() })
	if here := threadNice(); here != 0 || plain != 0 {
		t.Errorf("after Background: the caller's thread at nice %d, a plain Run's at %d; want 0 (Background's threads end with it)", here, plain)
	}
}
