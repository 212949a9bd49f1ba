// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"github.com/nri-sysctl/nri-sysctl/plugin/internal/trusteddir"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"golang.org/x/sys/unix"
)

const (
	goodText   = "sysctls:\n  net.ipv4.tcp_keepalive_time: 300\n"
	goodText2  = "sysctls:\n  net.ipv4.tcp_keepalive_time: 400\n"
	brokenText = "sysctls:\n  vm.swappiness: 1\n"
	// refusedText holds a value this kernel's probe refuses (fakeKernel).
	refusedText = "sysctls:\n  net.ipv4.tcp_keepalive_intvl: 50\n  net.ipv4.tcp_keepalive_time: abc\n"
)

// fakeKernel refuses the value "abc" (EINVAL), as probe.Kernel does, and
// stores every other value as written.
func fakeKernel(values map[string][]string) (map[string]error, map[string]map[string]sysctl.Stored, error) {
	stored := map[string]map[string]sysctl.Stored{}
	for n, vs := range values {
		stored[n] = map[string]sysctl.Stored{}
		for _, v := range vs {
			if v == "abc" {
				stored[n][v] = sysctl.Stored{Err: unix.EINVAL}
			} else {
				stored[n][v] = sysctl.Stored{Text: v}
			}
		}
	}
	return nil, stored, nil
}

// lastGoodPlugin is a plugin with the fake kernel check, metrics on, and
// --last-good-config in a directory of its own; it logs to logs.
func lastGoodPlugin(t *testing.T) (p *plugin, lastGood string, logs *syncBuffer) {
	t.Helper()
	fakeUserNamespaceProbe(t, func([]string) (map[sysctl.Writer]map[string]error, error) {
		return map[sysctl.Writer]map[string]error{}, nil
	})
	logs = &syncBuffer{}
	log := logrus.New()
	log.SetOutput(logs)
	p = newPlugin(log, fakeKernel, "")
	p.metricsListener.flag = "127.0.0.1:0"
	t.Cleanup(p.metricsListener.close)
	p.lastGoodPath = filepath.Join(trusteddir.Dir(t), "last-good-config.yaml")
	return p, p.lastGoodPath, logs
}

func readText(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// Each config put in force, at start and at a reload, is kept with its
// exact text and mode 0600, and nothing else is left in the directory;
// a rejected reload keeps nothing.
func TestLastGoodKeptOnStartAndReload(t *testing.T) {
	p, lastGood, _ := lastGoodPlugin(t)
	file := trusteddir.WriteConfig(t, goodText)
	if _, err := p.loadInitialConfig(file, false); err != nil {
		t.Fatal(err)
	}
	if got := readText(t, lastGood); got != goodText {
		t.Fatalf("kept %q after start, want %q", got, goodText)
	}
	info, err := os.Stat(lastGood)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v (%v), want 0600", info.Mode(), err)
	}
	file2 := trusteddir.WriteConfig(t, goodText2)
	p.reload(file2)
	if got := readText(t, lastGood); got != goodText2 {
		t.Fatalf("kept %q after a reload, want %q", got, goodText2)
	}
	for _, text := range []string{brokenText, refusedText} {
		p.reload(trusteddir.WriteConfig(t, text))
		if got := readText(t, lastGood); got != goodText2 {
			t.Fatalf("kept %q after a rejected reload of %q, want %q", got, text, goodText2)
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(lastGood))
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want the last good config alone", names)
	}
}

// The node's acceptance case: the mounted file was edited to a value the
// kernel refuses, and the plugin restarts. It starts on the last good
// config, counts the rejection, names the kept config in config_info, and
// still reloads the file once it is fixed.
func TestStartOnLastGoodWhenTheFileIsRejected(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(path string)
	}{
		{"refused by the kernel", func(path string) { os.WriteFile(path, []byte(refusedText), 0o600) }},
		{"invalid", func(path string) { os.WriteFile(path, []byte(brokenText), 0o600) }},
		{"missing", func(path string) { os.Remove(path) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, lastGood, logs := lastGoodPlugin(t)
			dir := newConfigMapDir(t, goodText)
			if _, err := p.loadInitialConfig(dir.path(), false); err != nil {
				t.Fatal(err)
			}
			// A restart with the file now bad: a new plugin, same node.
			p2, _, _ := lastGoodPlugin(t)
			p2.lastGoodPath = lastGood
			target, err := filepath.EvalSymlinks(dir.path())
			if err != nil {
				t.Fatal(err)
			}
			tc.write(target)
			old := time.Now().Add(-time.Minute)
			os.Chtimes(target, old, old)
			rejected, err := p2.loadInitialConfig(dir.path(), false)
			if err != nil {
				t.Fatalf("start with a rejected file and a last good config: %v\n%s", err, logs.String())
			}
			if got := keepaliveTime(p2); got != "300" {
				t.Fatalf("tcp_keepalive_time in force %q, want the last good config's 300", got)
			}
			m := p2.meter.Load()
			if got := testutil.ToFloat64(m.reloadsFailed); got != 1 {
				t.Errorf("failed reloads = %v, want 1", got)
			}
			if got := testutil.ToFloat64(m.reloadsSucceeded); got != 0 {
				t.Errorf("successful reloads = %v, want 0", got)
			}
			want := `nri_sysctl_config_info{hash="` + config.ShortHash(config.TextSHA256([]byte(goodText))) + `",mode="spec"} 1`
			if err := testutil.GatherAndCompare(m.registry, strings.NewReader("# HELP nri_sysctl_config_info The config in force: hash is the first 12 hex digits of the SHA-256 of its text, mode the mode in force. Always 1.\n# TYPE nri_sysctl_config_info gauge\n"+want+"\n"), "nri_sysctl_config_info"); err != nil {
				t.Error(err)
			}
			// The kept copy is not rewritten from itself.
			if got := readText(t, lastGood); got != goodText {
				t.Errorf("last good config now %q", got)
			}
			// The watch does not try the rejected text again (ten polls)...
			watchLogs := startWatching(t, p2, dir.path(), 10*time.Millisecond, make(chan os.Signal), rejected)
			time.Sleep(100 * time.Millisecond)
			if got := testutil.ToFloat64(m.reloadsFailed); got != 1 {
				t.Fatalf("failed reloads = %v after the watch started, want still 1: the rejected file was tried again\n%s", got, watchLogs.String())
			}
			// ... and a fixed edit is picked up by the watch, and kept.
			dir.update(goodText2)
			waitFor(t, "the fixed edit to be reloaded", func() bool { return keepaliveTime(p2) == "400" })
			waitFor(t, "the fixed edit to be kept", func() bool { t.Helper(); return readText(t, lastGood) == goodText2 })
			if got := testutil.ToFloat64(m.reloadsSucceeded); got != 1 {
				t.Errorf("successful reloads after the fix = %v, want 1\n%s", got, watchLogs.String())
			}
		})
	}
}

// The start-up fallback says so: at error level, with the file, the
// reason, the kept config and its sha256, and as a Warning Event.
func TestStartOnLastGoodSaysSo(t *testing.T) {
	p, lastGood, _ := lastGoodPlugin(t)
	if err := os.WriteFile(lastGood, []byte(goodText), 0o600); err != nil {
		t.Fatal(err)
	}
	events := &recordedEvents{}
	p.events = events
	hook := logtest.NewLocal(p.log)
	file := trusteddir.WriteConfig(t, refusedText)
	if _, err := p.loadInitialConfig(file, false); err != nil {
		t.Fatal(err)
	}
	e := findEntry(hook, "running on the last good config")
	if e == nil {
		t.Fatal("no log line saying the plugin runs on the last good config")
	}
	if e.Level != logrus.ErrorLevel || e.Data["file"] != file || e.Data["last_good"] != lastGood || e.Data["sha256"] != config.TextSHA256([]byte(goodText)) {
		t.Errorf("log line %v %v", e.Level, e.Data)
	}
	if err, _ := e.Data[logrus.ErrorKey].(error); err == nil || !strings.Contains(err.Error(), file+`:3: sysctls.net.ipv4.tcp_keepalive_time: the kernel refuses "abc" (invalid argument)`) {
		t.Errorf("log line's error %v: want the file, line and key", e.Data[logrus.ErrorKey])
	}
	sent := events.sent()
	if len(sent) != 1 {
		t.Fatalf("sent %+v, want one Event", sent)
	}
	msg := sent[0].message
	if sent[0].reason != reasonLastGoodConfig || sent[0].eventType != "Warning" ||
		!strings.HasPrefix(msg, "config rejected at start, running on the last good config (sha256 "+config.ShortHash(config.TextSHA256([]byte(goodText)))+"): ") ||
		!strings.Contains(msg, `net.ipv4.tcp_keepalive_time: the kernel refuses "abc"`) {
		t.Errorf("Event %+v", sent[0])
	}
}

// When there is nothing to fall back on, the plugin refuses to start,
// saying why, and sends that as an Event too.
func TestStartWithoutUsableLastGood(t *testing.T) {
	t.Run("first start: none kept yet", func(t *testing.T) {
		p, lastGood, _ := lastGoodPlugin(t)
		events := &recordedEvents{}
		p.events = events
		_, err := p.loadInitialConfig(trusteddir.WriteConfig(t, brokenText), false)
		if err == nil || !strings.Contains(err.Error(), "vm.swappiness") || !strings.Contains(err.Error(), "no last good config kept in "+lastGood+" yet") {
			t.Fatalf("err %v", err)
		}
		if sent := events.sent(); len(sent) != 1 || sent[0].reason != reasonConfigRejected || !strings.HasPrefix(sent[0].message, "config rejected at start, refusing to start: ") {
			t.Errorf("sent %+v, want one ConfigRejected Event", sent)
		}
	})
	t.Run("the kept config is rejected too", func(t *testing.T) {
		p, lastGood, _ := lastGoodPlugin(t)
		os.WriteFile(lastGood, []byte(refusedText), 0o600)
		_, err := p.loadInitialConfig(trusteddir.WriteConfig(t, brokenText), false)
		if err == nil || !strings.Contains(err.Error(), "vm.swappiness") || !strings.Contains(err.Error(), "the last good config cannot be used either") || !strings.Contains(err.Error(), lastGood+":3: sysctls.net.ipv4.tcp_keepalive_time") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("the kept config is not trusted", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root: the trust check wants root-owned files")
		}
		p, lastGood, _ := lastGoodPlugin(t)
		os.WriteFile(lastGood, []byte(goodText), 0o600)
		os.Chmod(lastGood, 0o666)
		_, err := p.loadInitialConfig(trusteddir.WriteConfig(t, brokenText), false)
		if err == nil || !strings.Contains(err.Error(), "writable by group or others") {
			t.Fatalf("err %v, want the trust check's refusal of the kept config", err)
		}
	})
	t.Run("without --last-good-config: as before", func(t *testing.T) {
		p, lastGood, _ := lastGoodPlugin(t)
		os.WriteFile(lastGood, []byte(goodText), 0o600)
		p.lastGoodPath = ""
		_, err := p.loadInitialConfig(trusteddir.WriteConfig(t, brokenText), false)
		if err == nil || strings.Contains(err.Error(), "last good") {
			t.Fatalf("err %v, want the file's rejection alone", err)
		}
	})
}

func findEntry(hook *logtest.Hook, msg string) *logrus.Entry {
	for _, e := range hook.AllEntries() {
		if strings.Contains(e.Message, msg) {
			return e
		}
	}
	return nil
}
