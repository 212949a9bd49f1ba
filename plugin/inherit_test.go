// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/plugin/internal/trusteddir"
	"github.com/sirupsen/logrus"
)

// The plugin run with --skip-kernel-check refuses a config with
// inheritFromHost rather than run it without its inherited keys.
func TestPluginRefusesUnexpandedInheritance(t *testing.T) {
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	var buf strings.Builder
	p.log.SetOutput(&buf)
	p.reload(trusteddir.WriteConfig(t, "inheritFromHost: [net.ipv4.tcp_keepalive_time]\n"))
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
