// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package probe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/nsthread"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

func needRootForUserNS(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to map a user namespace to other host ids")
	}
}

// Checked by hand on 6.18 with util-linux: a sleep in `unshare --user --net
// --ipc --uts` with uid/gid maps "0 100000 65536", then `nsenter -U -n -i -u
// --setuid 0 --setgid 0` (runc in the pod) and `nsenter -n -i -u` (host root)
// opening each file for writing.
// namesForBoth asks both writers about names alone.
func namesForBoth(names ...string) map[sysctl.Writer]map[string][]string {
	return map[sysctl.Writer]map[string][]string{sysctl.WriterInPod: noValues(names...), sysctl.WriterHost: noValues(names...)}
}

func TestUserNamespace(t *testing.T) {
	needRootForUserNS(t)
	res, err := UserNamespace(namesForBoth(
		"net.core.xfrm_acq_expires", "net.ipv6.route.gc_thresh", "net.core.somaxconn",
		"net.ipv4.tcp_keepalive_time", "net.ipv4.ping_group_range",
		"net.ipv4.conf.eth0.rp_filter", "kernel.msgmax", "kernel.sem",
		"fs.mqueue.msg_max", "kernel.domainname",
		// Not probed: no pod namespace of these kinds is created.
		"user.max_user_namespaces", "vm.swappiness",
	))
	if err != nil {
		t.Fatal(err)
	}
	refused := res.Refused
	hidden, denied := ErrHiddenInUserNamespace.Error(), ErrDeniedInUserNamespace.Error()
	want := map[sysctl.Writer]map[string]string{
		// runc is the root of the pod's user namespace, not host root:
		// the UTS table belongs to host root.
		sysctl.WriterInPod: {
			"net.core.xfrm_acq_expires": hidden,
			"net.ipv6.route.gc_thresh":  hidden,
			"kernel.domainname":         denied,
		},
		// IPC keys belong to the root of the namespace's owner.
		sysctl.WriterHost: {
			"net.core.xfrm_acq_expires": hidden,
			"net.ipv6.route.gc_thresh":  hidden,
			"kernel.msgmax":             denied,
			"kernel.sem":                denied,
			"fs.mqueue.msg_max":         denied,
		},
	}
	got := map[sysctl.Writer]map[string]string{}
	for w, keys := range refused {
		got[w] = map[string]string{}
		for k, why := range keys {
			got[w][k] = why.Error()
			if !errors.Is(why, ErrHiddenInUserNamespace) && !errors.Is(why, ErrDeniedInUserNamespace) {
				t.Errorf("%v: %s: %v is neither named error", w, k, why)
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("refused =\n  %v\nwant\n  %v", got, want)
	}
}

func TestUserNamespaceNoNames(t *testing.T) {
	res, err := UserNamespace(namesForBoth("vm.swappiness"))
	refused := res.Refused
	if err != nil || len(refused) != 2 || len(refused[sysctl.WriterInPod]) != 0 || len(refused[sysctl.WriterHost]) != 0 {
		t.Fatalf("UserNamespace(none probed) = %v, %v; want two empty sets", refused, err)
	}
}

// The helper is killed by Pdeathsig when the thread that forked it exits,
// and namespace-mode writes end threads on purpose. Every single run (no
// retry) must survive them.
func TestUserNamespaceSurvivesEndingThreads(t *testing.T) {
	needRootForUserNS(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ended atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				nsthread.Run(func() { unix.Unshare(unix.CLONE_NEWUTS) })
				ended.Add(1)
				// Paced, to leave the 2-core test machines some CPU.
				time.Sleep(time.Millisecond)
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	names := []string{"net.core.somaxconn", "kernel.domainname"}
	for i := range 50 {
		res, err := runHelper(helperArg0, helperTimeout, namesForBoth(names...))
		refused := res.Refused
		if err != nil {
			t.Fatalf("run %d (after %d threads ended): %v", i, ended.Load(), err)
		}
		if _, ok := refused[sysctl.WriterInPod]["kernel.domainname"]; !ok {
			t.Fatalf("run %d: result without kernel.domainname: %v", i, refused)
		}
	}
	t.Logf("%d threads ended during the runs", ended.Load())
}

// A process started with the old marker variable is not the helper: only
// argv[0] makes one.
func TestIsHelper(t *testing.T) {
	t.Setenv("NRI_SYSCTL_INTERNAL_USERNS_PROBE", "1")
	if IsHelper([]string{"/usr/local/bin/nri-sysctl"}) || IsHelper(nil) || !IsHelper([]string{helperArg0}) {
		t.Fatal("IsHelper must go by argv[0] alone")
	}
	if code := RunHelper([]string{helperArg0, "extra"}); code != 2 {
		t.Fatalf("RunHelper with an argument: exit %d, want 2", code)
	}
}

// reportFilesArg0 makes the test binary, re-executed like the helper,
// print what it inherited (see TestMain).
const reportFilesArg0 = "nri-sysctl-test-report-files"

func reportFiles() int {
	if err := becomeNamespaceRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, e := range entries {
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		fmt.Printf("fd\t%s\t%s\n", e.Name(), target)
	}
	for _, kv := range os.Environ() {
		fmt.Printf("env\t%s\n", kv)
	}
	uidMap, _ := os.ReadFile("/proc/self/uid_map")
	fmt.Printf("uid_map\t%s\n", strings.Join(strings.Fields(string(uidMap)), " "))
	fmt.Printf("uid\t%d\n", os.Getuid())
	status, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "CapEff:") {
			fmt.Printf("CapEff\t%s\n", strings.TrimSpace(strings.TrimPrefix(line, "CapEff:")))
		}
	}
	return 0
}

// The helper gets nothing of this process but its stdio: no file that was
// inherited without close-on-exec (as containerd hands over the NRI
// socket), no environment. It runs as the root of a user namespace that
// maps it to a host uid that is not root.
func TestHelperInheritsNothing(t *testing.T) {
	needRootForUserNS(t)
	marker := filepath.Join(t.TempDir(), "inherited-without-cloexec")
	fd, err := unix.Open(marker, unix.O_CREAT|unix.O_RDWR, 0o600) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	t.Setenv("NRI_PLUGIN_SOCKET", fmt.Sprint(fd))

	ctx, cancel := context.WithTimeout(context.Background(), helperTimeout)
	defer cancel()
	cmd, err := newHelper(ctx, reportFilesArg0)
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Path != "/proc/self/exe" {
		t.Fatalf("helper runs %s, want /proc/self/exe (the running binary, not the file on disk)", cmd.Path)
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := startHelper(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	caps, err := allCapabilities()
	if err != nil {
		t.Fatal(err)
	}
	var fds []string
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		fields := strings.Split(line, "\t")
		seen[fields[0]] = true
		switch fields[0] {
		case "fd":
			fds = append(fds, fields[1])
			if fields[2] == marker {
				t.Errorf("the helper inherited fd %s (%s)", fields[1], marker)
			}
		case "env":
			t.Errorf("the helper has environment %s", fields[1])
		case "uid_map":
			if fields[1] != "0 100000 65536" {
				t.Errorf("helper uid_map %q, want 0 100000 65536", fields[1])
			}
		case "uid":
			if fields[1] != "0" {
				t.Errorf("helper uid %s, want 0 (the namespace's root)", fields[1])
			}
		case "CapEff":
			// Every capability, in its own user namespace, as runc has.
			if want := fmt.Sprintf("%016x", uint64(1)<<(len(caps))-1); fields[1] != want {
				t.Errorf("helper capabilities %s, want %s", fields[1], want)
			}
		}
	}
	if !seen["uid_map"] || !seen["uid"] || !seen["CapEff"] {
		t.Errorf("incomplete report:\n%s", stdout.String())
	}
	if !slices.Contains(fds, "0") || !slices.Contains(fds, "2") {
		t.Errorf("helper fds %v lack its stdio", fds)
	}
}

// The fallback for kernels without close_range(CLOSE_RANGE_CLOEXEC).
func TestCloseOnExecByProcFD(t *testing.T) {
	fd, err := unix.Open("/dev/null", unix.O_RDONLY, 0) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := closeOnExecByProcFD(); err != nil {
		t.Fatal(err)
	}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil {
		t.Fatal(err)
	}
	if flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("fd %d is still inherited across exec", fd)
	}
}

// noUserNamespacesArg0 makes the test binary probe in a user namespace
// that allows no nested one (see TestMain).
const noUserNamespacesArg0 = "nri-sysctl-test-no-user-namespaces"

func probeWithNoUserNamespaces() int {
	// Per user namespace: this one's limit only.
	if err := os.WriteFile("/proc/sys/user/max_user_namespaces", []byte("0"), 0); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_, err := UserNamespace(namesForBoth("kernel.domainname"))
	fmt.Print(err)
	if !errors.Is(err, ErrUserNamespacesDisabled) {
		return 1
	}
	return 0
}

// A node with user.max_user_namespaces=0 (in a user namespace of the test's
// own, so as not to touch the host's limit) gives ErrUserNamespacesDisabled.
func TestUserNamespaceDisabled(t *testing.T) {
	needRootForUserNS(t)
	ctx, cancel := context.WithTimeout(context.Background(), helperTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/proc/self/exe")
	cmd.Args = []string{noUserNamespacesArg0}
	cmd.Env = []string{}
	identity := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1<<32 - 1}}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: identity, GidMappings: identity, GidMappingsEnableSetgroups: true}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if want := "user namespace probe: " + ErrUserNamespacesDisabled.Error() + ": starting the helper: fork/exec /proc/self/exe: no space left on device"; string(out) != want {
		t.Fatalf("error %q, want %q", out, want)
	}
}

// hangArg0 makes the test binary a helper that never answers (see TestMain).
const hangArg0 = "nri-sysctl-test-hang"

func TestHelperTimeout(t *testing.T) {
	needRootForUserNS(t)
	start := time.Now()
	_, err := runHelper(hangArg0, 300*time.Millisecond, namesForBoth("kernel.domainname"))
	if err == nil || err.Error() != "the helper did not finish within 300ms" {
		t.Fatalf("err = %v", err)
	}
	// Killed, not waited for until it ends by itself.
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %s", took)
	}
}

// Each writer writes its values in the user-namespace pod's namespaces:
// the kernel reads ping_group_range's GIDs in the writer's own user
// namespace, so an unclamped range is refused to runc in the pod, and a
// range within the pod's GIDs is kept by each writer in its own terms.
func TestUserNamespaceValues(t *testing.T) {
	needRootForUserNS(t)
	_, hostGID, size := HelperGIDs()
	podRange := fmt.Sprintf("0 %d", size-1)
	hostRange := fmt.Sprintf("%d %d", hostGID, hostGID+size-1)
	res, err := UserNamespace(map[sysctl.Writer]map[string][]string{
		sysctl.WriterInPod: {
			"net.ipv4.ping_group_range":   {podRange, "0 2147483647"},
			"net.ipv4.tcp_keepalive_time": {"600", "abc"},
		},
		sysctl.WriterHost: {
			"net.ipv4.ping_group_range":   {hostRange},
			"net.ipv4.tcp_keepalive_time": {"600", "abc"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	judged := func(w sysctl.Writer, key, value string) string {
		s, ok := res.Stored[w][key][value]
		if !ok {
			return "no result"
		}
		got, err := sysctl.Judge(value, s)
		if err != nil {
			return err.Error()
		}
		return got
	}
	tests := []struct {
		w          sysctl.Writer
		key, value string
		want       string
	}{
		{sysctl.WriterInPod, "net.ipv4.ping_group_range", podRange, podRange},
		{sysctl.WriterInPod, "net.ipv4.ping_group_range", "0 2147483647", `the kernel refuses "0 2147483647" (invalid argument)`},
		{sysctl.WriterHost, "net.ipv4.ping_group_range", hostRange, hostRange},
		{sysctl.WriterInPod, "net.ipv4.tcp_keepalive_time", "600", "600"},
		{sysctl.WriterHost, "net.ipv4.tcp_keepalive_time", "600", "600"},
		{sysctl.WriterInPod, "net.ipv4.tcp_keepalive_time", "abc", `the kernel refuses "abc" (invalid argument)`},
		{sysctl.WriterHost, "net.ipv4.tcp_keepalive_time", "abc", `the kernel refuses "abc" (invalid argument)`},
	}
	for _, tt := range tests {
		if got := judged(tt.w, tt.key, tt.value); got != tt.want {
			t.Errorf("%v writes %s %q: %s, want %s", tt.w, tt.key, tt.value, got, tt.want)
		}
	}
}
