package sysctl

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// ErrMissing marks a sysctl that a fresh pod namespace does not have.
var ErrMissing = errors.New("does not exist in a fresh pod namespace on this kernel")

// ProbeKernel checks that each normalized name exists inside fresh network,
// IPC and UTS namespaces. Host files are no guide: many net.* keys exist on
// the host but not in a new network namespace. It returns the names that are
// missing (mapped to ErrMissing) and an error if the probe itself could not
// run, for example without CAP_SYS_ADMIN.
func ProbeKernel(names []string) (map[string]error, error) {
	done := make(chan probeResult, 1)
	go probeThread(names, done)
	r := <-done
	return r.missing, r.err
}

type probeResult struct {
	missing map[string]error
	err     error
}

// probeThread enters throw-away namespaces on a locked thread that it never
// unlocks, so Go ends the thread with the goroutine instead of reusing it.
// The main thread is the exception: Go cannot end it and parks it for good,
// still in the throw-away namespaces, where /proc/self/ns/* would show them.
// On the main thread, probeThread holds the thread and probes from another
// goroutine, which cannot run there meanwhile.
func probeThread(names []string, done chan<- probeResult) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		inner := make(chan probeResult, 1)
		go probeThread(names, inner)
		done <- <-inner
		runtime.UnlockOSThread()
		return
	}
	if err := unix.Unshare(unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS); err != nil {
		done <- probeResult{err: fmt.Errorf("kernel probe: cannot create throw-away namespaces (needs root): %w; use --skip-kernel-check to leave the kernel probe out", err)}
		return
	}
	missing := map[string]error{}
	for _, name := range names {
		if NamespaceOf(name) == NotNamespaced {
			continue
		}
		if _, err := os.Stat(Path(ProbeName(name))); err != nil {
			missing[name] = ErrMissing
		}
	}
	done <- probeResult{missing: missing}
}
