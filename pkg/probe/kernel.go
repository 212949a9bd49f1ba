// Package probe asks the running kernel which sysctls a pod can be given.
// It needs root: it creates throw-away namespaces, and the user namespace
// probe re-executes this binary.
package probe

import (
	"errors"
	"fmt"
	"os"

	"github.com/nri-sysctl/nri-sysctl/pkg/nsthread"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

// Kernel checks that each normalized name exists, and can be set,
// inside fresh network, IPC and UTS namespaces. Host files are no guide:
// many net.* keys exist on the host but not in a new network namespace, and
// some exist there read-only. It returns the names that cannot be set
// (mapped to sysctl.ErrMissing or sysctl.ErrReadOnly) and an error if the probe itself
// could not run, for example without CAP_SYS_ADMIN.
func Kernel(names []string) (missing map[string]error, err error) {
	nsthread.Run(func() {
		if err = unix.Unshare(unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS); err != nil {
			err = fmt.Errorf("kernel probe: cannot create throw-away namespaces (needs root): %w; use --skip-kernel-check to leave the kernel probe out", err)
			return
		}
		missing = map[string]error{}
		for _, name := range names {
			if sysctl.NamespaceOf(name) == sysctl.NotNamespaced {
				continue
			}
			path := sysctl.Path(sysctl.ProbeName(name))
			if _, statErr := os.Stat(path); statErr != nil {
				missing[name] = sysctl.ErrMissing
				continue
			}
			// The kernel checks sysctl permissions at open; nothing
			// is written.
			f, openErr := os.OpenFile(path, os.O_WRONLY, 0)
			if openErr != nil {
				if errors.Is(openErr, os.ErrPermission) {
					missing[name] = sysctl.ErrReadOnly
				}
				continue
			}
			f.Close()
		}
	})
	return missing, err
}
