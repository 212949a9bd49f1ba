package sysctl

import (
	"errors"
	"fmt"
	"os"

	"github.com/nri-sysctl/nri-sysctl/pkg/nsthread"
	"golang.org/x/sys/unix"
)

// ErrMissing marks a sysctl that a fresh pod namespace does not have.
var ErrMissing = errors.New("does not exist in a fresh pod namespace on this kernel")

// ProbeKernel checks that each normalized name exists inside fresh network,
// IPC and UTS namespaces. Host files are no guide: many net.* keys exist on
// the host but not in a new network namespace. It returns the names that are
// missing (mapped to ErrMissing) and an error if the probe itself could not
// run, for example without CAP_SYS_ADMIN.
func ProbeKernel(names []string) (missing map[string]error, err error) {
	nsthread.Run(func() {
		if err = unix.Unshare(unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS); err != nil {
			err = fmt.Errorf("kernel probe: cannot create throw-away namespaces (needs root): %w; use --skip-kernel-check to leave the kernel probe out", err)
			return
		}
		missing = map[string]error{}
		for _, name := range names {
			if NamespaceOf(name) == NotNamespaced {
				continue
			}
			if _, statErr := os.Stat(Path(ProbeName(name))); statErr != nil {
				missing[name] = ErrMissing
			}
		}
	})
	return missing, err
}
