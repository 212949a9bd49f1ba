// Package runtimemode decides how sysctls reach a pod on a given runtime:
// through the OCI spec (runtimes that apply NRI sysctl adjustments) or by
// writing them into the pod's namespaces (runtimes that drop them silently).
package runtimemode

import (
	"fmt"
	"strconv"
	"strings"
)

// Mode is how sysctls are applied.
type Mode string

const (
	// Spec: SetLinuxSysctl on every container; runc writes the values.
	Spec Mode = "spec"
	// Namespace: the plugin writes the values into the pod's namespaces
	// at RunPodSandbox, before any app container exists.
	Namespace Mode = "namespace"
)

// version is a parsed major.minor.patch.
type version [3]int

func (v version) atLeast(o version) bool {
	for i := range v {
		if v[i] != o[i] {
			return v[i] > o[i]
		}
	}
	return true
}

// firstSpecVersion is the first release of each runtime known to apply
// NRI sysctl adjustments (NRI v0.11). Older ones drop them without a word.
var firstSpecVersion = map[string]version{
	"containerd": {2, 2, 1},
	"cri-o":      {1, 35, 0},
}

// Decide picks the mode for a runtime name and version as NRI reports them.
// Anything unknown or unparsable gets namespace mode: assuming the newer
// behaviour would leave pods at kernel defaults with no sign of it.
func Decide(runtimeName, runtimeVersion string) (Mode, string) {
	name := strings.ToLower(runtimeName)
	first, known := firstSpecVersion[name]
	if !known {
		return Namespace, fmt.Sprintf("runtime %q is not known to apply NRI sysctl adjustments", runtimeName)
	}
	v, err := parse(runtimeVersion)
	if err != nil {
		return Namespace, fmt.Sprintf("cannot parse %s version %q (%v); assuming it drops NRI sysctl adjustments", runtimeName, runtimeVersion, err)
	}
	if v.atLeast(first) {
		return Spec, fmt.Sprintf("%s %s applies NRI sysctl adjustments (>= %d.%d.%d)", runtimeName, runtimeVersion, first[0], first[1], first[2])
	}
	return Namespace, fmt.Sprintf("%s %s drops NRI sysctl adjustments (< %d.%d.%d)", runtimeName, runtimeVersion, first[0], first[1], first[2])
}

// parse reads "2.4.2", "v1.7.27", "2.1.9+unknown" or "1.35.0-dev".
func parse(s string) (version, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	if i := strings.IndexAny(s, "+-~ "); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return version{}, fmt.Errorf("want major.minor[.patch]")
	}
	var v version
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return version{}, fmt.Errorf("bad number %q", p)
		}
		v[i] = n
	}
	return v, nil
}
