// Package nsthread runs code on an OS thread that may change namespaces and
// is thrown away afterwards, so no other goroutine ever runs in them.
package nsthread

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// Run calls fn on a locked OS thread that is never unlocked, so Go ends the
// thread with the goroutine instead of reusing it. The main thread is the
// exception: Go cannot end it and would park it for good, still in whatever
// namespaces fn entered (and keep a pod's netns alive). On the main thread
// Run holds the thread and calls fn from another goroutine, which cannot
// be scheduled there meanwhile.
func Run(fn func()) {
	done := make(chan struct{})
	go onThread(fn, done)
	<-done
}

func onThread(fn func(), done chan<- struct{}) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		inner := make(chan struct{})
		go onThread(fn, inner)
		<-inner
		runtime.UnlockOSThread()
		close(done)
		return
	}
	defer close(done)
	fn()
}
