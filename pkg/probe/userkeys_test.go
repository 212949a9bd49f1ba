// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package probe

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

// userKeyValues is what the user.* tests probe, and userKeyVerdicts what
// the kernel (6.x) makes of it.
var userKeyValues = map[string][]string{
	"user.max_ipc_namespaces":  {"777", "abc", "-5"},
	"user.max_inotify_watches": {"010", "8192"},
	"user.max_bogus":           {"1"},
}

var userKeyVerdicts = []string{
	`user.max_bogus: refused: ` + sysctl.ErrMissing.Error(),
	`user.max_inotify_watches "010": the kernel stores "010" as "8"; write 8 (a leading 0 makes the kernel read octal)`,
	`user.max_inotify_watches "8192": 8192`,
	`user.max_ipc_namespaces "-5": the kernel refuses "-5" (invalid argument)`,
	`user.max_ipc_namespaces "777": 777`,
	`user.max_ipc_namespaces "abc": the kernel refuses "abc" (invalid argument)`,
}

// verdicts lists what Kernel's answer means for each name and value.
func verdicts(values map[string][]string, refused map[string]error, stored map[string]map[string]sysctl.Stored) []string {
	var out []string
	for name, vs := range values {
		if why, ok := refused[name]; ok {
			out = append(out, name+": refused: "+why.Error())
			continue
		}
		for _, v := range vs {
			s, ok := stored[name][v]
			if !ok {
				out = append(out, fmt.Sprintf("%s %q: no result", name, v))
				continue
			}
			got, err := sysctl.Judge(v, s)
			if err != nil {
				got = err.Error()
			}
			out = append(out, fmt.Sprintf("%s %q: %s", name, v, got))
		}
	}
	sort.Strings(out)
	return out
}

// readUserLimits reads every /proc/sys/user file: the limits of the
// caller's user namespace.
func readUserLimits() (string, error) {
	paths, err := filepath.Glob("/proc/sys/user/*")
	if err != nil || len(paths) == 0 {
		return "", fmt.Errorf("no /proc/sys/user: %w", err)
	}
	sort.Strings(paths)
	var b strings.Builder
	for _, p := range paths {
		v, err := readSysctl(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s=%s ", filepath.Base(p), v)
	}
	return strings.TrimSpace(b.String()), nil
}

// A valid user.* key is accepted, and each value judged as the kernel
// takes it. (Before, root without CAP_SYS_RESOURCE was refused the host's
// file, "read-only inside a pod's namespace"; root with it wrote the
// host's limit.)
func TestKernelUserKeys(t *testing.T) {
	needRootForUserNS(t)
	before, err := readUserLimits()
	if err != nil {
		t.Fatal(err)
	}
	refused, stored, err := Kernel(userKeyValues)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(verdicts(userKeyValues, refused, stored), "\n"); got != strings.Join(userKeyVerdicts, "\n") {
		t.Errorf("verdicts:\n%s\nwant:\n%s", got, strings.Join(userKeyVerdicts, "\n"))
	}
	if after, err := readUserLimits(); err != nil || after != before {
		t.Errorf("this namespace's user.* limits went from %s to %s (%v)", before, after, err)
	}
}

// The offline check, for nodes where no user namespace can be made, gives
// the verdicts the kernel gives.
func TestCheckUserKeyOffline(t *testing.T) {
	refused, stored := map[string]error{}, map[string]map[string]sysctl.Stored{}
	for name, vs := range userKeyValues {
		if why := checkUserKeyOffline(name, vs, stored); why != nil {
			refused[name] = why
		}
	}
	if got := strings.Join(verdicts(userKeyValues, refused, stored), "\n"); got != strings.Join(userKeyVerdicts, "\n") {
		t.Errorf("verdicts:\n%s\nwant:\n%s", got, strings.Join(userKeyVerdicts, "\n"))
	}
	if why := checkUserKeyOffline("user", nil, stored); !errors.Is(why, sysctl.ErrNotASysctl) {
		t.Errorf("user: %v", why)
	}
	for v, want := range map[string]string{
		"0": "0", " 600 ": "600", "2147483647": "2147483647", "0x10": "16", "007": "7", "00": "0",
		"2147483648": "", "+5": "", "-0": "", "0x": "", "08": "", "1_000": "", "": "", "5 6": "", "0b1": "",
	} {
		n, ok := parseUserLimit(v)
		if got := strconv.FormatUint(n, 10); (want == "") == ok || (ok && got != want) {
			t.Errorf("parseUserLimit(%q) = %d, %v; want %q", v, n, ok, want)
		}
	}
}

const (
	// userNSHostArg0 makes the test binary play the host: the root of a
	// user namespace of its own, which has CAP_SYS_RESOURCE there (the
	// machine's root may lack it) and so may change its user.* limits,
	// as host root on a node may. It runs probeUserKeysArg0 and reports
	// its limits before and after (see userNSHost).
	userNSHostArg0 = "nri-sysctl-test-userns-host"
	// probeUserKeysArg0 makes the test binary run Kernel on
	// userKeyValues and print the verdicts.
	probeUserKeysArg0 = "nri-sysctl-test-probe-user-keys"
	// userNSHostModeEnv says what userNSHost does: "complete" lets the
	// probe finish, "kill" SIGKILLs it between a write and its restore,
	// "nouserns" lets no user namespace be created first.
	userNSHostModeEnv = "NRI_SYSCTL_TEST_USERNS_HOST"
	// pauseFIFO, in the working directory, stops each process of the
	// test binary that writes a user.* file right after the write (see
	// pauseAtFIFO). The probe and its helper inherit the directory.
	pauseFIFO = "nri-sysctl-test-pause"
)

// pauseAtFIFO is afterWrite in the test binary's re-executed processes:
// after a write to a user.* file, when pauseFIFO exists in the working
// directory, it sends "pid value-read-back" there and stops for good.
func pauseAtFIFO(path string) {
	if !strings.HasPrefix(path, "/proc/sys/user/") {
		return
	}
	f, err := os.OpenFile(pauseFIFO, os.O_WRONLY, 0)
	if err != nil {
		return
	}
	v, _ := readSysctl(path)
	fmt.Fprintf(f, "%d %s\n", os.Getpid(), v)
	f.Close()
	for {
		time.Sleep(time.Hour)
	}
}

func probeUserKeysAndPrint() int {
	refused, stored, err := Kernel(userKeyValues)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, v := range verdicts(userKeyValues, refused, stored) {
		fmt.Println(v)
	}
	return 0
}

// userNSHost is the host the probe runs on: it gives its user.* limits
// values of its own, runs the probe, and prints "before=", "after=" and
// the probe's output; in "kill" mode also "paused=" (what the paused
// writer read back) and "during=" (this namespace's limits meanwhile).
func userNSHost() int {
	mode := os.Getenv(userNSHostModeEnv)
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		return 1
	}
	// Limits other than the probe's values and the kernel's defaults,
	// so that a write shows.
	set := map[string]string{"max_ipc_namespaces": "4321", "max_inotify_watches": "54321"}
	if mode == "nouserns" {
		set["max_user_namespaces"] = "0"
	}
	for name, v := range set {
		if err := writeSysctl("/proc/sys/user/"+name, v); err != nil {
			return fail("setting user.%s: %v", name, err)
		}
	}
	before, err := readUserLimits()
	if err != nil {
		return fail("%v", err)
	}
	if mode == "kill" {
		// The helper is root of a user namespace of its own, mapped to
		// a host uid that is not root: it must reach the FIFO.
		if err := unix.Mkfifo(pauseFIFO, 0o666); err != nil {
			return fail("mkfifo: %v", err)
		}
		if err := os.Chmod(pauseFIFO, 0o666); err != nil {
			return fail("%v", err)
		}
	}
	var out, stderr bytes.Buffer
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{probeUserKeysArg0}
	cmd.Env = []string{}
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Start(); err != nil {
		return fail("starting the probe: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if mode == "kill" {
		paused := make(chan string, 1)
		go func() {
			// Read-write: the open does not wait for a writer, and a
			// second helper (the probe's retry) is not blocked either.
			f, err := os.OpenFile(pauseFIFO, os.O_RDWR, 0)
			if err != nil {
				paused <- "error " + err.Error()
				return
			}
			line, _ := bufio.NewReader(f).ReadString('\n')
			paused <- strings.TrimSpace(line)
		}()
		select {
		case line := <-paused:
			during, err := readUserLimits()
			if err != nil {
				return fail("%v", err)
			}
			pid, value, _ := strings.Cut(line, " ")
			n, err := strconv.Atoi(pid)
			if err != nil {
				return fail("from the FIFO: %q", line)
			}
			// The writer first, then the probe (whose helper, if it
			// is the writer, would get SIGKILL anyway).
			_ = unix.Kill(n, unix.SIGKILL)
			_ = cmd.Process.Kill()
			<-exited
			fmt.Printf("paused=%s\nduring=%s\n", value, during)
		case err := <-exited:
			return fail("the probe ended without stopping after a write: %v\n%s%s", err, out.String(), stderr.String())
		}
	} else if err := <-exited; err != nil {
		return fail("the probe: %v\n%s", err, stderr.String())
	}
	after, err := readUserLimits()
	if err != nil {
		return fail("%v", err)
	}
	fmt.Printf("before=%s\nafter=%s\n%s", before, after, out.String())
	return 0
}

// runUserNSHost runs userNSHost in mode in a user namespace of its own,
// with uid and gid 0 to 2^32-2 mapped to themselves (so the helper's
// mapping fits in it), and returns its output by line prefix.
func runUserNSHost(t *testing.T, mode string) (fields map[string]string, out string) {
	t.Helper()
	needRootForUserNS(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	// Bounds a hang only (a probe that never stops, a FIFO never
	// written); no result depends on it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/proc/self/exe")
	cmd.Args = []string{userNSHostArg0}
	cmd.Env = []string{userNSHostModeEnv + "=" + mode}
	cmd.Dir = dir
	identity := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1<<32 - 1}}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: identity, GidMappings: identity, GidMappingsEnableSetgroups: true}
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the host's stand-in: %v\n%s", err, b)
	}
	fields = map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.Contains(k, " ") {
			fields[k] = v
		}
	}
	return fields, string(b)
}

// The probe writes no user.* limit of the namespace it runs in, which
// plays the host: one whose root may change them. Where no user namespace
// can be created ("nouserns"), the values are judged without a write, as
// the kernel would, and nothing is written either.
func TestKernelUserKeysLeaveTheHostAlone(t *testing.T) {
	for _, mode := range []string{"complete", "nouserns"} {
		t.Run(mode, func(t *testing.T) {
			f, out := runUserNSHost(t, mode)
			if f["before"] == "" || f["after"] != f["before"] {
				t.Errorf("the host's user.* limits went from %s to %s:\n%s", f["before"], f["after"], out)
			}
			for _, want := range userKeyVerdicts {
				if !strings.Contains(out, want+"\n") {
					t.Errorf("the probe did not print %q:\n%s", want, out)
				}
			}
		})
	}
}

// A probe killed between a write and its restore leaves the host's
// user.* limits as they were: the write was in a namespace only the probe
// held. (Before, the probe wrote the host's own and died with 777 there.)
func TestKernelUserKeysKilledMidWay(t *testing.T) {
	f, out := runUserNSHost(t, "kill")
	// The writer had written the first probe value (names in order:
	// user.max_inotify_watches "010", read back in its own namespace as
	// 8) when it was stopped; the host's stand-in has 54321 there.
	if f["paused"] != "8" {
		t.Errorf("the writer was stopped with %q in its file, want 8:\n%s", f["paused"], out)
	}
	if f["before"] == "" || f["during"] != f["before"] || f["after"] != f["before"] {
		t.Errorf("the host's user.* limits: before %s, while the probe was stopped %s, after it was killed %s:\n%s", f["before"], f["during"], f["after"], out)
	}
}
