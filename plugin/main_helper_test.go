// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"os"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/probe"
)

// validate and explain run the user namespace probe, which re-executes
// this binary as its helper; the test binary must then be the helper, as
// main is.
func TestMain(m *testing.M) {
	if probe.IsHelper(os.Args) {
		os.Exit(probe.RunHelper(os.Args))
	}
	os.Exit(m.Run())
}
