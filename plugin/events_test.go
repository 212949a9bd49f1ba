// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"strings"
	"sync"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/plugin/internal/trusteddir"
)

// sentEvent is one Event the plugin sent.
type sentEvent struct {
	eventType, reason, message string
}

// recordedEvents stands for the Kubernetes Event recorder: it keeps what
// the plugin sends.
type recordedEvents struct {
	mu     sync.Mutex
	events []sentEvent
}

func (r *recordedEvents) Warn(reason, message string)   { r.add("Warning", reason, message) }
func (r *recordedEvents) Normal(reason, message string) { r.add("Normal", reason, message) }

func (r *recordedEvents) add(eventType, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, sentEvent{eventType, reason, message})
}

func (r *recordedEvents) sent() []sentEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sentEvent(nil), r.events...)
}

// A reload the plugin rejects, and one it takes, are sent as Events; the
// rejection's message starts "reload rejected: " and names the file,
// line, key and reason.
func TestReloadSendsEvents(t *testing.T) {
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	events := &recordedEvents{}
	p.events = events
	bad := trusteddir.WriteConfig(t, "sysctls:\n  vm.swappiness: 1\n")
	p.reload(bad)
	good := trusteddir.WriteConfig(t, "sysctls:\n  net.ipv4.tcp_keepalive_time: 300\n")
	p.reload(good)
	sent := events.sent()
	if len(sent) != 2 {
		t.Fatalf("sent %+v, want two Events", sent)
	}
	if sent[0].eventType != "Warning" || sent[0].reason != reasonConfigRejected || !strings.HasPrefix(sent[0].message, "reload rejected: ") ||
		!strings.Contains(sent[0].message, bad+":2: sysctls.vm.swappiness: vm.swappiness is not namespaced") {
		t.Errorf("rejection Event %+v", sent[0])
	}
	if sent[1].reason != reasonConfigReloaded || sent[1].eventType != "Normal" {
		t.Errorf("reload Event %+v", sent[1])
	}
}
