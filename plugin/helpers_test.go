package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/policy"
)

// useFetcher makes every config, the one in force and later ones, look
// pods up through f.
func (p *plugin) useFetcher(f podsysctl.Fetcher) {
	p.connect = func(*config.Config) (podsysctl.Fetcher, error) { return f, nil }
	next := *p.current.Load()
	next.lookup = p.meter.Load().meterLookups(f)
	p.current.Store(&next)
}

// setConfig puts cfg in force without the probe or a mode change.
func (p *plugin) setConfig(cfg *config.Config) {
	next := *p.current.Load()
	next.cfg, next.refused, next.policy = cfg, nil, policy.Compile(cfg, nil)
	p.current.Store(&next)
}

// hasRecord tells whether the plugin keeps a record for the pod.
func (p *plugin) hasRecord(podID string) bool {
	p.records.mu.Lock()
	defer p.records.mu.Unlock()
	_, ok := p.records.pods[podID]
	return ok
}

// lackingLogged counts the containers Synchronize logged as lacking the
// defaults: one line names each.
func lackingLogged(log string) int { return strings.Count(log, "lacks the node's sysctl defaults") }

// writeFile writes a config where the plugin trusts it, when the test runs
// as root: in a directory that, like every one above it, is root's and not
// writable by group or others. t.TempDir will not do: /tmp is mode 1777.
func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(configDir(t), "config.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	// A file written moments ago is read only once it has held still
	// (config.Load's settle time); these are written once, not edited.
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	return path
}

func configDir(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		return t.TempDir()
	}
	for _, base := range []string{"/run", "/var/lib"} {
		if !rootOnly("/") || !rootOnly(base) {
			continue
		}
		dir, err := os.MkdirTemp(base, "nri-sysctl-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	t.Fatal("found no root-owned directory that is not group/other-writable to test in (tried /run, /var/lib)")
	return ""
}

func rootOnly(dir string) bool {
	var st syscall.Stat_t
	return syscall.Stat(dir, &st) == nil && st.Uid == 0 && st.Mode&0o022 == 0
}

// noSuchPid is the sandbox pid of test pods: above the kernel's
// PID_MAX_LIMIT (4194304), it is never a live process, so a namespace-mode
// record takes no pidfd for it.
const noSuchPid = 4194999
