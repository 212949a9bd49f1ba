// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package containerdversion

import "testing"

func TestParseAndConfigVersion(t *testing.T) {
	for _, tc := range []struct {
		version      string
		major, minor int
		config       int
	}{
		{"v1.7.36", 1, 7, 2},
		{"v2.0.14", 2, 0, 3},
		{"v2.2.10", 2, 2, 3},
		{"v2.3.7", 2, 3, 4},
		{"2.4.2", 2, 4, 4},
		{"v3.0.0", 3, 0, 4},
		{"v2", 2, 0, 3},
	} {
		major, minor := Parse(tc.version)
		if major != tc.major || minor != tc.minor {
			t.Errorf("Parse(%q) = %d.%d, want %d.%d", tc.version, major, minor, tc.major, tc.minor)
		}
		if got := ConfigVersion(tc.version); got != tc.config {
			t.Errorf("ConfigVersion(%q) = %d, want %d", tc.version, got, tc.config)
		}
	}
}
