package probe

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// userNSProbeEnv makes a re-executed copy of this binary run the user
// namespace probe instead of its main function.
const userNSProbeEnv = "NRI_SYSCTL_INTERNAL_USERNS_PROBE"

func init() {
	if os.Getenv(userNSProbeEnv) == "1" {
		os.Exit(userNSProbeChild())
	}
}

// UserNamespace reports which namespaced sysctls the kernel refuses to
// let a pod with its own user namespace set: inside a network namespace
// owned by a non-initial user namespace, some keys are hidden
// (net.core.xfrm_*, net.ipv6.route.*) or read-only, even for the
// namespace's root. Names that do not exist in any pod namespace are the
// kernel probe's business and should be left out by the caller. A new user namespace
// needs a single-threaded process, so the probe runs in a re-executed copy
// of this binary, started in fresh user, network and IPC namespaces.
func UserNamespace(names []string) (map[string]bool, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("user namespace probe: %w", err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), userNSProbeEnv+"=1")
	cmd.Stdin = strings.NewReader(strings.Join(names, "\n"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("user namespace probe: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	refused := map[string]bool{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if name := strings.TrimSpace(sc.Text()); name != "" {
			refused[name] = true
		}
	}
	return refused, nil
}

// userNSProbeChild runs inside the fresh namespaces: it opens each key for
// writing (the kernel checks sysctl permissions at open) without writing,
// and prints the ones it may not write.
func userNSProbeChild() int {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		name := strings.TrimSpace(sc.Text())
		if ns := sysctl.NamespaceOf(name); ns != sysctl.Net && ns != sysctl.IPC {
			continue
		}
		f, err := os.OpenFile(sysctl.Path(sysctl.ProbeName(name)), os.O_WRONLY, 0)
		if err == nil {
			f.Close()
			continue
		}
		// Read-only here, or hidden from namespaces that a user namespace
		// owns (the xfrm and IPv6 route keys, for example).
		if errors.Is(err, os.ErrPermission) || errors.Is(err, os.ErrNotExist) {
			fmt.Println(name)
		}
	}
	return 0
}
