// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/plugin/internal/trusteddir"
	"github.com/sirupsen/logrus"
)

// configMapDir lays out a config the way the kubelet writes a ConfigMap
// volume: config.yaml -> ..data/config.yaml, ..data -> ..<generation>.
type configMapDir struct {
	t   *testing.T
	dir string
	gen int
}

func newConfigMapDir(t *testing.T, text string) *configMapDir {
	d := &configMapDir{t: t, dir: trusteddir.Dir(t)}
	d.update(text)
	if err := os.Symlink("..data/config.yaml", filepath.Join(d.dir, "config.yaml")); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *configMapDir) path() string { return filepath.Join(d.dir, "config.yaml") }

// update writes a new generation and swaps ..data to it atomically, as the
// kubelet's atomic writer does.
func (d *configMapDir) update(text string) {
	d.t.Helper()
	d.gen++
	gen := fmt.Sprintf("..gen_%d", d.gen)
	if err := os.Mkdir(filepath.Join(d.dir, gen), 0o755); err != nil {
		d.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.dir, gen, "config.yaml"), []byte(text), 0o400); err != nil {
		d.t.Fatal(err)
	}
	tmp := filepath.Join(d.dir, "..data_tmp")
	if err := os.Symlink(gen, tmp); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, "..data")); err != nil {
		d.t.Fatal(err)
	}
}

// syncBuffer is a log destination tests may read while the plugin writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func keepaliveTime(p *plugin) string {
	for _, e := range p.current.Load().cfg.Sysctls {
		if e.Key == "net.ipv4.tcp_keepalive_time" {
			return e.Value
		}
	}
	return ""
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func startWatching(t *testing.T, p *plugin, path string, interval time.Duration, hup chan os.Signal, rejected string) *syncBuffer {
	t.Helper()
	var logs syncBuffer
	p.log.SetOutput(&logs)
	p.log.SetLevel(logrus.DebugLevel)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	reloads := p.watchConfigFile(ctx, path, interval, hup, rejected)
	go func() { defer close(done); p.watchReloads(ctx, path, reloads) }()
	return &logs
}

// A ConfigMap update (the ..data swap) is reloaded without a signal; a
// broken one is rejected once, and the config in force stays until the
// next good one.
func TestWatchConfigFileFollowsConfigMapUpdates(t *testing.T) {
	cm := newConfigMapDir(t, "sysctls:\n  net.ipv4.tcp_keepalive_time: 600\n")
	p := newTestPlugin(t, "", &fakeFetcher{})
	p.reload(cm.path())
	if got := keepaliveTime(p); got != "600" {
		t.Fatalf("initial config: keepalive %q, want 600", got)
	}
	logs := startWatching(t, p, cm.path(), 10*time.Millisecond, make(chan os.Signal), "")

	cm.update("sysctls:\n  net.ipv4.tcp_keepalive_time: 300\n")
	waitFor(t, "the edited config to be in force", func() bool { return keepaliveTime(p) == "300" })

	cm.update("sysctls:\n  net.ipv4.tcp_keepalive_time: 100\n  vm.swappiness: 1\n")
	waitFor(t, "the broken edit to be rejected", func() bool { return strings.Contains(logs.String(), "reload rejected") })
	time.Sleep(100 * time.Millisecond) // ten more polls
	if got := keepaliveTime(p); got != "300" {
		t.Fatalf("after a broken edit: keepalive %q, want the last good 300", got)
	}
	if n := strings.Count(logs.String(), "reload rejected"); n != 1 {
		t.Fatalf("a broken edit was rejected %d times, want once (not at every poll):\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "vm.swappiness") {
		t.Fatalf("the rejection does not name the bad key:\n%s", logs)
	}

	cm.update("sysctls:\n  net.ipv4.tcp_keepalive_time: 200\n")
	waitFor(t, "the fixed config to be in force", func() bool { return keepaliveTime(p) == "200" })
}

// Polling does not reload an unchanged file, and SIGHUP still reloads.
func TestWatchConfigFileForwardsSIGHUP(t *testing.T) {
	path := trusteddir.WriteConfig(t, "sysctls:\n  net.ipv4.tcp_keepalive_time: 600\n")
	p := newTestPlugin(t, "", &fakeFetcher{})
	p.reload(path)
	hup := make(chan os.Signal, 1)
	logs := startWatching(t, p, path, 10*time.Millisecond, hup, "")
	time.Sleep(100 * time.Millisecond)
	if strings.Contains(logs.String(), "reloaded") {
		t.Fatalf("an unchanged file was reloaded:\n%s", logs)
	}

	// A slow poll: only SIGHUP can reload within the test.
	path2 := trusteddir.WriteConfig(t, "sysctls:\n  net.ipv4.tcp_keepalive_time: 600\n")
	p2 := newTestPlugin(t, "", &fakeFetcher{})
	p2.reload(path2)
	hup2 := make(chan os.Signal, 1)
	startWatching(t, p2, path2, time.Hour, hup2, "")
	if err := os.WriteFile(path2+".new", []byte("sysctls:\n  net.ipv4.tcp_keepalive_time: 450\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path2+".new", path2); err != nil {
		t.Fatal(err)
	}
	hup2 <- syscall.SIGHUP
	waitFor(t, "SIGHUP to reload", func() bool { return keepaliveTime(p2) == "450" })
}

// An edit made after the config was loaded but before the watcher took its
// first look is a change: the watcher starts from what was loaded, not
// from the file as it is when it starts.
func TestWatchConfigFileReloadsEditBeforeWatchStart(t *testing.T) {
	path := trusteddir.WriteConfig(t, "sysctls:\n  net.ipv4.tcp_keepalive_time: 600\n")
	p := newTestPlugin(t, "", &fakeFetcher{})
	p.reload(path)
	if err := os.WriteFile(path+".new", []byte("sysctls:\n  net.ipv4.tcp_keepalive_time: 450\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	startWatching(t, p, path, 10*time.Millisecond, make(chan os.Signal), "")
	waitFor(t, "the edit made before the watch started to be reloaded", func() bool { return keepaliveTime(p) == "450" })
}

// A file that goes missing is reported once and the config stays.
func TestWatchConfigFileMissingFile(t *testing.T) {
	path := trusteddir.WriteConfig(t, "sysctls:\n  net.ipv4.tcp_keepalive_time: 600\n")
	p := newTestPlugin(t, "", &fakeFetcher{})
	p.reload(path)
	logs := startWatching(t, p, path, 10*time.Millisecond, make(chan os.Signal), "")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the missing file to be reported", func() bool { return strings.Contains(logs.String(), "cannot read it") })
	time.Sleep(100 * time.Millisecond)
	if n := strings.Count(logs.String(), "cannot read it"); n != 1 {
		t.Fatalf("missing file reported %d times, want once:\n%s", n, logs)
	}
	if got := keepaliveTime(p); got != "600" {
		t.Fatalf("keepalive %q after the file went missing, want 600", got)
	}
}

func TestConfigDigestRefusesFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := configDigest(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("configDigest(fifo) = %v, want a not-a-regular-file error", err)
	}
}
