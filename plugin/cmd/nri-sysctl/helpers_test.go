// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/probe"
)

// TestMain registers the kernel probe's re-executed helper, as main does:
// validate, explain and audit probe the kernel through this test binary.
func TestMain(m *testing.M) {
	if probe.IsHelper(os.Args) {
		os.Exit(probe.RunHelper(os.Args))
	}
	os.Exit(m.Run())
}
