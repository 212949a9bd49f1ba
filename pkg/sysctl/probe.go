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

// ErrReadOnly marks a sysctl that a fresh pod namespace has but that cannot
// be set there (net.core.rmem_max, for one, on 6.x kernels).
var ErrReadOnly = errors.New("is read-only inside a pod's namespace on this kernel (only the host's value can be changed; use /etc/sysctl.d)")

// ProbeKernel checks that each normalized name exists, and can be set,
// inside fresh network, IPC and UTS namespaces. Host files are no guide:
// many net.* keys exist on the host but not in a new network namespace, and
// some exist there read-only. It returns the names that cannot be set
// (mapped to ErrMissing or ErrReadOnly) and an error if the probe itself
// could not run, for example without CAP_SYS_ADMIN.
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
			path := Path(ProbeName(name))
			if _, statErr := os.Stat(path); statErr != nil {
				missing[name] = ErrMissing
				continue
			}
			// The kernel checks sysctl permissions at open; nothing
			// is written.
			f, openErr := os.OpenFile(path, os.O_WRONLY, 0)
			if openErr != nil {
				if errors.Is(openErr, os.ErrPermission) {
					missing[name] = ErrReadOnly
				}
				continue
			}
			f.Close()
		}
	})
	return missing, err
}
