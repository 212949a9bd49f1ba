// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package vm

// One boot of a node image under qemu (TCG: KVM guests fail on these
// machines, see /work/shared/runtime-notes.md), and the agent that runs the
// test's commands inside it.
//
// - The boot disk is a qcow2 overlay on the cached raw image, in the test's
//   temporary directory: every boot starts from the same image, and the
//   image is never written.
// - ttyS0 (the kernel and systemd console) goes to console.log.
// - ttyS1 is a unix socket: vmtest-agent.service reads "ID BASE64(cmd)"
//   lines from it and answers "VMTEST-RESULT ID RC BASE64(output)".
// - qemu is stopped by its pid: `systemctl poweroff` in the guest first,
//   SIGKILL when that does not end it; a watchdog kills a hung qemu.

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// running lists the VMs of this test binary, for interrupted: a SIGTERM
// or SIGINT runs no test cleanup.
var (
	runningMu sync.Mutex
	running   = map[*vm]bool{}
)

func TestMain(m *testing.M) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go interrupted(sigs)
	code := m.Run()
	removePackages()
	os.Exit(code)
}

// interrupted kills every qemu this binary started, by pid, removes their
// temporary directories and this run's temporary files in the cache, and
// exits.
func interrupted(sigs <-chan os.Signal) {
	sig := <-sigs
	runningMu.Lock()
	for v := range running {
		fmt.Fprintf(os.Stderr, "%s: killing qemu pid %d and removing %s\n", sig, v.cmd.Process.Pid, v.dir)
		_ = v.cmd.Process.Kill()
		<-v.exited
		os.RemoveAll(filepath.Dir(v.dir)) // the test's whole t.TempDir root
	}
	temps, _ := filepath.Glob(filepath.Join(cacheDir(), "vm", tempPrefix("*")+"*"))
	for _, p := range temps {
		os.RemoveAll(p)
	}
	os.Exit(2)
}

type vm struct {
	t        *testing.T // the (sub)test running now: helpers report to it
	owner    *testing.T // the test that booted the VM: the VM ends with it
	name     string
	dir      string
	console  string
	monitor  string // qemu's monitor socket: sysrq for a wedged guest
	cmd      *exec.Cmd
	exited   chan struct{}
	waitErr  error
	conn     net.Conn
	started  time.Time
	watchdog *time.Timer

	runMu   sync.Mutex // one command at a time
	mu      sync.Mutex
	nextID  int
	waiting map[int]chan agentResult
	ready   chan string // boot ids of VMTEST-READY lines
}

type agentResult struct {
	rc  int
	out string
}

func envDuration(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}

// bootVM boots img with the scenario on the kernel command line and waits
// for the agent. The VM is powered off (or killed) when the test ends.
func bootVM(t *testing.T, img *nodeImage, scenario, brk string) *vm {
	t.Helper()
	dir := t.TempDir()
	v := &vm{
		t:       t,
		owner:   t,
		name:    scenario,
		dir:     dir,
		console: filepath.Join(dir, "console.log"),
		monitor: filepath.Join(dir, "monitor.sock"),
		exited:  make(chan struct{}),
		waiting: map[int]chan agentResult{},
		ready:   make(chan string, 4),
	}
	disk := filepath.Join(dir, "disk.qcow2")
	if err := run(dir, "qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", img.root, disk); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "agent.sock")
	// sysrq_always_enabled: a failed test asks the kernel for its blocked
	// tasks (sysrqBlockedTasks); Debian's default allows no such dump.
	cmdline := "root=/dev/vda rw console=ttyS0 panic=1 sysrq_always_enabled vmtest.scenario=" + scenario
	if brk != "" {
		cmdline += " vmtest.break=" + brk
	}
	// For trying things by hand, e.g. NRI_SYSCTL_VM_APPEND=vmtest.harden=clock,ipdeny.
	if extra := os.Getenv("NRI_SYSCTL_VM_APPEND"); extra != "" {
		cmdline += " " + extra
	}
	// qemu64, not max: the guest ran about 15 % faster with it under TCG
	// (pods up 47-48 s after qemu started against 53-55 s, TestVMPreinstalled
	// 106 s against 130 s, measured one after the other); the node's
	// binaries need nothing above x86-64's baseline. NRI_SYSCTL_VM_CPU
	// tries another model.
	args := []string{
		"-accel", "tcg,thread=multi", "-cpu", envOr("NRI_SYSCTL_VM_CPU", "qemu64"), "-m", "2048", "-smp", "2",
		"-kernel", img.kernel, "-initrd", img.initrd, "-append", cmdline,
		"-drive", "file=" + disk + ",format=qcow2,if=virtio",
		"-display", "none", "-monitor", "unix:" + v.monitor + ",server=on,wait=off", "-nic", "none", "-no-reboot",
		"-serial", "file:" + v.console,
		"-chardev", "socket,id=agent,path=" + sock + ",server=on,wait=off",
		"-serial", "chardev:agent",
	}
	v.cmd = exec.Command("qemu-system-x86_64", args...)
	v.cmd.Dir = dir
	qlog, err := os.Create(filepath.Join(dir, "qemu.log"))
	if err != nil {
		t.Fatal(err)
	}
	v.cmd.Stdout, v.cmd.Stderr = qlog, qlog
	// qemu goes with the test binary if that dies.
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := v.cmd.Start(); err != nil {
		t.Fatalf("start qemu: %v", err)
	}
	v.started = time.Now()
	t.Logf("[%s] qemu pid %d, containerd %s, kernel command line %q", v.name, v.cmd.Process.Pid, img.containerd, cmdline)
	go func() {
		v.waitErr = v.cmd.Wait()
		qlog.Close()
		close(v.exited)
	}()
	runningMu.Lock()
	running[v] = true
	runningMu.Unlock()
	// A hung guest must not hang the test run.
	limit := envDuration("NRI_SYSCTL_VM_TIMEOUT", 30*time.Minute)
	v.watchdog = time.AfterFunc(limit, func() {
		v.owner.Errorf("[%s] qemu still running after %s: killing pid %d", v.name, limit, v.cmd.Process.Pid)
		_ = v.cmd.Process.Kill()
	})
	t.Cleanup(v.stop)

	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.Dial("unix", sock)
		if err == nil {
			v.conn = conn
			break
		}
		select {
		case <-v.exited:
			t.Fatalf("qemu exited at start: %v\n%s", v.waitErr, tailFile(filepath.Join(dir, "qemu.log"), 20))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no agent socket from qemu after 10s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	go v.readLoop()

	bootTimeout := envDuration("NRI_SYSCTL_VM_BOOT_TIMEOUT", 10*time.Minute)
	select {
	case id := <-v.ready:
		t.Logf("[%s] agent up %s after qemu started (boot %s)", v.name, time.Since(v.started).Round(time.Second), id)
	case <-v.exited:
		t.Fatalf("[%s] qemu exited before the agent came up: %v\nconsole:\n%s", v.name, v.waitErr, tailFile(v.console, 60))
	case <-time.After(bootTimeout):
		t.Fatalf("[%s] no agent after %s\nconsole:\n%s", v.name, bootTimeout, tailFile(v.console, 60))
	}
	if _, err := v.run("true", time.Minute); err != nil {
		t.Fatalf("[%s] agent does not answer: %v", v.name, err)
	}
	return v
}

func (v *vm) readLoop() {
	sc := bufio.NewScanner(v.conn)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if i := strings.Index(line, "VMTEST-"); i > 0 {
			line = line[i:] // noise before it (echo before the agent's stty)
		}
		switch {
		case strings.HasPrefix(line, "VMTEST-READY "):
			select {
			case v.ready <- strings.TrimPrefix(line, "VMTEST-READY "):
			default:
			}
		case strings.HasPrefix(line, "VMTEST-RESULT "):
			f := strings.SplitN(line, " ", 4)
			if len(f) < 3 {
				continue
			}
			id, err1 := strconv.Atoi(f[1])
			rc, err2 := strconv.Atoi(f[2])
			if err1 != nil || err2 != nil {
				continue
			}
			var out []byte
			if len(f) == 4 {
				out, _ = base64.StdEncoding.DecodeString(f[3])
			}
			v.mu.Lock()
			ch := v.waiting[id]
			delete(v.waiting, id)
			v.mu.Unlock()
			if ch != nil {
				ch <- agentResult{rc: rc, out: string(out)}
			}
		}
	}
}

var errExit = errors.New("command failed")

// run runs a bash command in the guest and returns its combined output. A
// non-zero exit status is an error (wrapping errExit) that carries the output.
func (v *vm) run(command string, timeout time.Duration) (string, error) {
	v.runMu.Lock()
	defer v.runMu.Unlock()
	v.mu.Lock()
	v.nextID++
	id := v.nextID
	ch := make(chan agentResult, 1)
	v.waiting[id] = ch
	v.mu.Unlock()
	defer func() {
		v.mu.Lock()
		delete(v.waiting, id)
		v.mu.Unlock()
	}()
	line := fmt.Sprintf("%d %s\n", id, base64.StdEncoding.EncodeToString([]byte(command)))
	if _, err := v.conn.Write([]byte(line)); err != nil {
		return "", fmt.Errorf("send to agent: %w", err)
	}
	select {
	case r := <-ch:
		out := strings.TrimRight(r.out, "\n")
		if r.rc != 0 {
			return out, fmt.Errorf("%w (exit %d): %s\n%s", errExit, r.rc, firstLine(command), out)
		}
		return out, nil
	case <-v.exited:
		return "", fmt.Errorf("qemu exited while running %q: %w", firstLine(command), v.waitErr)
	case <-time.After(timeout):
		return "", fmt.Errorf("no answer from the agent after %s to %q", timeout, firstLine(command))
	}
}

// sh runs a command that must succeed.
func (v *vm) sh(command string) string {
	v.t.Helper()
	out, err := v.run(command, 5*time.Minute)
	if err != nil {
		v.t.Fatalf("[%s] %v", v.name, err)
	}
	return out
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// stop ends the VM: the guest's journal is logged when the test failed
// (the plugin's own lines apart, since kubelet's crowd them out of the tail),
// then an immediate poweroff (the disk is a throw-away overlay, and an
// orderly one waits 90s for each `sleep infinity` container, which ignores
// SIGTERM as PID 1), then SIGKILL by pid if qemu is still there after 60s.
func (v *vm) stop() {
	defer v.watchdog.Stop()
	defer func() {
		runningMu.Lock()
		delete(running, v)
		runningMu.Unlock()
	}()
	select {
	case <-v.exited:
		return
	default:
	}
	if v.owner.Failed() {
		// First, while the guest may still be wedged: what its kernel
		// blocks on (needs no process in the guest).
		if err := v.sysrqBlockedTasks(); err != nil {
			v.owner.Logf("[%s] no blocked-task list from the guest kernel: %v", v.name, err)
		}
		if out, err := v.run("systemctl --no-pager --failed; crictl pods; crictl ps -a; journalctl -b --no-pager -o short-monotonic -u containerd -u nri-sysctl -u kubelet -u vmtest-images -u vmtest-setup | tail -n 150; echo '--- the plugin by its journal identifier, also when containerd launched it:'; journalctl -b --no-pager -o short-monotonic -t nri-sysctl | tail -n 40", 2*time.Minute); err == nil || out != "" {
			v.owner.Logf("[%s] guest state at failure:\n%s", v.name, out)
		}
		data, err := os.ReadFile(v.console)
		if err != nil {
			v.owner.Logf("[%s] console: %v", v.name, err)
		} else {
			v.owner.Logf("[%s] console tail:\n%s", v.name, lastLines(string(data), 40))
			// Last, where a CI log's tail keeps it: the kernel's reports, folded.
			if reports := kernelReports(string(data)); len(reports) > 0 {
				v.owner.Logf("[%s] the guest kernel's reports on the console, folded:\n%s", v.name, strings.Join(reports, "\n"))
			} else {
				v.owner.Logf("[%s] the guest kernel reported nothing on the console (no hung task, lockup, stall or oops)", v.name)
			}
		}
	}
	start := time.Now()
	line := fmt.Sprintf("0 %s\n", base64.StdEncoding.EncodeToString([]byte("systemctl poweroff --force --force")))
	if v.conn != nil {
		_, _ = v.conn.Write([]byte(line))
	}
	select {
	case <-v.exited:
		v.owner.Logf("[%s] powered off in %s (%s after qemu started)", v.name, time.Since(start).Round(time.Second), time.Since(v.started).Round(time.Second))
	case <-time.After(60 * time.Second):
		v.owner.Logf("[%s] still running 60s after poweroff: SIGKILL to qemu pid %d", v.name, v.cmd.Process.Pid)
		_ = v.cmd.Process.Kill()
		<-v.exited
	}
	if v.conn != nil {
		v.conn.Close()
	}
}

func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return lastLines(string(data), n)
}

// envOr is the environment variable name, or def where it is empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
