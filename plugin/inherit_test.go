package main

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/sirupsen/logrus"
)

// hostValue reads a host sysctl as inheritFromHost does: tabs as spaces.
func hostValue(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile("/proc/sys/" + path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(strings.TrimSuffix(string(data), "\n"), "\t", " ")
}

// validate lists each inherited key with the host's value and its entry;
// an explicit value wins and is not listed as inherited.
func TestValidateShowsInheritedKeys(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the kernel probe needs root")
	}
	path := writeFile(t, "inheritFromHost:\n  - net.ipv4.tcp_keepalive_*\n  - net.ipv4.ip_local_port_range\nsysctls:\n  net.ipv4.tcp_keepalive_time: 600\n")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"validate", "--config", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	want := path + ": valid (4 default(s), 0 rule(s), 0 profile(s))\n" +
		"net.ipv4.tcp_keepalive_intvl " + hostValue(t, "net/ipv4/tcp_keepalive_intvl") + " (inherited from the host, entry net.ipv4.tcp_keepalive_*)\n" +
		"net.ipv4.tcp_keepalive_probes " + hostValue(t, "net/ipv4/tcp_keepalive_probes") + " (inherited from the host, entry net.ipv4.tcp_keepalive_*)\n" +
		"net.ipv4.ip_local_port_range " + hostValue(t, "net/ipv4/ip_local_port_range") + " (inherited from the host, entry net.ipv4.ip_local_port_range)\n"
	if got := stdout.String(); got != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", got, want)
	}
}

// Without the probe validate cannot expand inheritFromHost: it says so and
// does not fail.
func TestValidateSkipKernelCheckInheritance(t *testing.T) {
	path := writeFile(t, "inheritFromHost: [\"net.*\"]\n")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"validate", "--skip-kernel-check", "--config", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "inheritFromHost: 1 entry(ies) not expanded: without the kernel probe (--skip-kernel-check)") {
		t.Errorf("stdout does not say the entries were not expanded:\n%s", stdout.String())
	}
}

// The plugin run with --skip-kernel-check refuses a config with
// inheritFromHost rather than run it without its inherited keys.
func TestPluginRefusesUnexpandedInheritance(t *testing.T) {
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	var buf strings.Builder
	p.log.SetOutput(&buf)
	p.reload(writeFile(t, "inheritFromHost: [net.ipv4.tcp_keepalive_time]\n"))
	if !strings.Contains(buf.String(), "inheritFromHost needs the kernel probe") {
		t.Errorf("log does not say why the config was refused:\n%s", buf.String())
	}
	if got := p.current.Load().cfg.InheritFromHost; len(got) != 0 {
		t.Errorf("config with unexpanded inheritFromHost put in force: %+v", got)
	}
}

func TestLogInheritance(t *testing.T) {
	inherited := func(kv ...string) *config.Config {
		cfg := &config.Config{InheritFromHost: []config.Inheritance{{Pattern: "net.*", Line: 1}}, InheritExpanded: true}
		for i := 0; i+1 < len(kv); i += 2 {
			cfg.Sysctls = append(cfg.Sysctls, config.Entry{Key: kv[i], Value: kv[i+1], Line: 1, Source: config.SourceHost, Pattern: "net.*"})
			cfg.InheritFromHost[0].Keys = append(cfg.InheritFromHost[0].Keys, kv[i])
		}
		// The entry matched a key the file sets: that value wins, is
		// not inherited, and its changes are never reported.
		cfg.Sysctls = append(cfg.Sysctls, config.Entry{Key: "net.core.somaxconn", Value: kv[len(kv)-1], Line: 2})
		cfg.InheritFromHost[0].Keys = append(cfg.InheritFromHost[0].Keys, "net.core.somaxconn")
		return cfg
	}
	logged := func(prev, cfg *config.Config) []map[string]any {
		var buf bytes.Buffer
		log := logrus.New()
		log.SetOutput(&buf)
		log.SetFormatter(&logrus.JSONFormatter{DisableTimestamp: true})
		logInheritance(log, prev, cfg)
		var lines []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			delete(m, "level")
			lines = append(lines, m)
		}
		return lines
	}
	entry := map[string]any{"msg": "inheriting the host's sysctls", "entry": "net.*", "line": 1.0, "matched": 4.0, "inherited": 3.0, "left_out": 0.0}

	// First load: what each entry brought, no changes.
	first := inherited("net.a", "1", "net.b", "2 3", "net.c", "4")
	if got, want := logged(&config.Config{}, first), []map[string]any{entry}; !reflect.DeepEqual(got, want) {
		t.Errorf("first load logged %v, want %v", got, want)
	}

	// Reload: one line per key whose inherited value changed, came or went.
	next := inherited("net.a", "1", "net.b", "2 30", "net.d", "5")
	want := []map[string]any{
		entry,
		{"msg": "inherited host value changed", "key": "net.b", "old": "2 3", "new": "2 30"},
		{"msg": "inherited host value changed", "key": "net.c", "old": "4", "new": notInherited},
		{"msg": "inherited host value changed", "key": "net.d", "old": notInherited, "new": "5"},
	}
	if got := logged(first, next); !reflect.DeepEqual(got, want) {
		t.Errorf("reload logged:\n%v\nwant\n%v", got, want)
	}
}
