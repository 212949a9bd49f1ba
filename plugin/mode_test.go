// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
	"github.com/nri-sysctl/nri-sysctl/plugin/internal/trusteddir"
	"github.com/sirupsen/logrus"
)

// Spec mode forced on a runtime whose NRI panics on sysctl
// adjustments fails the registration (and a reload asking for it is
// rejected whole); auto mode picks namespace there.
func TestForcedSpecModeRefusedOnCrashingRuntime(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	p := newPlugin(log, nil, runtimemode.Spec)
	_, err := p.Configure(context.Background(), "", "containerd", "2.2.9")
	if err == nil || !strings.Contains(err.Error(), "2.2.9") || !strings.Contains(err.Error(), "panics") {
		t.Fatalf("Configure with --mode spec on containerd 2.2.9: err = %v, want a refusal naming the version and the panic", err)
	}

	q := newTestPlugin(t, testConfig, &fakeFetcher{})
	if _, err := q.Configure(context.Background(), "", "containerd", "2.2.9"); err != nil {
		t.Fatal(err)
	}
	if q.mode() != runtimemode.Namespace {
		t.Fatalf("auto mode on 2.2.9: %s, want namespace", q.mode())
	}
	q.reload(trusteddir.WriteConfig(t, "sysctls: {net.core.somaxconn: 1024}\nmode: spec\n"))
	if got := q.current.Load().cfg.Sysctls; len(got) != 3 || q.mode() != runtimemode.Namespace {
		t.Fatalf("a reload asking for spec mode on 2.2.9 must be rejected whole: mode %s, sysctls %v", q.mode(), got)
	}
}

// The NRI version the stub infers for a runtime that reported
// none is not taken for a report (the stub calls containerd 2.3 v0.11.0).
func TestReportedNRIVersion(t *testing.T) {
	for _, tc := range []struct{ stub, runtime, version, want string }{
		{"v0.12.3", "containerd", "2.4.2", "v0.12.3"},
		{"v0.11.0", "containerd", "v2.3.7", ""}, // the stub's guess
		{"v0.11.0", "containerd", "v2.2.9", ""},
		{api.UnknownVersion, "containerd", "2.2.9", ""}, // no guess without the "v"
		{"", "containerd", "2.1.9", ""},
		{api.UnknownVersion, "cri-o", "1.36.0", ""},
	} {
		if got := reportedNRIVersion(tc.stub, tc.runtime, tc.version); got != tc.want {
			t.Errorf("reportedNRIVersion(%q, %s %s) = %q, want %q", tc.stub, tc.runtime, tc.version, got, tc.want)
		}
	}
}
