// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/audit"
)

func TestAuditFlags(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"audit", "--read"}, &stdout, &stderr); code != audit.Failed || !strings.Contains(stderr.String(), "--read needs --config") {
		t.Errorf("--read without --config: exit %d, %s", code, stderr.String())
	}
	stderr.Reset()
	missing := t.TempDir() + "/none.sock"
	if code := run([]string{"audit", "--containerd-address", missing, "--timeout", "5s"}, &stdout, &stderr); code != audit.Failed || !strings.Contains(stderr.String(), missing) {
		t.Errorf("no containerd: exit %d, %s", code, stderr.String())
	}
}
