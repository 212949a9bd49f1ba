// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package containerdversion holds the facts about containerd release lines
// that the end-to-end harness and the VM test both need, so that each lives
// in one place.
package containerdversion

import (
	"strconv"
	"strings"
)

// Parse returns the major and minor of a version such as "v2.3.7" (0 for a
// part that is missing or not a number).
func Parse(version string) (major, minor int) {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	major, _ = strconv.Atoi(parts[0])
	if len(parts) > 1 {
		minor, _ = strconv.Atoi(parts[1])
	}
	return major, minor
}

// ConfigVersion is the config.toml version a containerd expects: 2 for 1.x,
// 3 for 2.0-2.2, 4 from 2.3 (which would migrate a version 3 file at
// start-up, but is given what it expects).
func ConfigVersion(version string) int {
	switch major, minor := Parse(version); {
	case major < 2:
		return 2
	case major == 2 && minor < 3:
		return 3
	}
	return 4
}
