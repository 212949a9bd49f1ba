// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package runtimemode decides how sysctls reach a pod on a given runtime:
// through the OCI spec (runtimes whose NRI applies sysctl adjustments safely)
// or by writing them into the pod's namespaces (runtimes that drop them
// silently, or crash on them).
package runtimemode

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// Mode is how sysctls are applied. The same type serves the --mode flag, the
// config's mode field and the runtime's choice.
type Mode string

const (
	// Auto: decided from the runtime at registration.
	Auto Mode = "auto"
	// Spec: SetLinuxSysctl on every container; runc writes the values.
	Spec Mode = "spec"
	// Namespace: the plugin writes the values into the pod's namespaces.
	Namespace Mode = "namespace"
)

// modes are every mode, Auto first: the one list the flag, the config and
// their messages name.
var modes = []Mode{Auto, Spec, Namespace}

// Names are the modes' names, Auto first.
func Names() []string {
	names := make([]string, len(modes))
	for i, m := range modes {
		names[i] = string(m)
	}
	return names
}

// Writer tells who writes the sysctls in a mode: runc inside the pod in
// spec mode, the plugin as host root in namespace mode.
func (m Mode) Writer() sysctl.Writer {
	if m == Spec {
		return sysctl.WriterInPod
	}
	return sysctl.WriterHost
}

// Parse reads a mode as the flag and the config spell it; "" is Auto.
func Parse(s string) (Mode, error) {
	m := Mode(strings.TrimSpace(s))
	if m == "" {
		return Auto, nil
	}
	if slices.Contains(modes, m) {
		return m, nil
	}
	return "", fmt.Errorf("unknown mode %q: want one of %s", s, strings.Join(Names(), ", "))
}

// Runtime is what NRI tells a plugin about the runtime at registration.
type Runtime struct {
	Name    string
	Version string
	// NRIVersion is the NRI version the runtime reported, or "" when it
	// did not report one (runtimes older than NRI v0.12).
	NRIVersion string
}

func (r Runtime) String() string {
	s := r.Name + " " + r.Version
	if r.NRIVersion != "" {
		s += " (NRI " + r.NRIVersion + ")"
	}
	return s
}

// NRI versions that matter: v0.11.0 added sysctl adjustments, and its
// result.adjustSysctl writes into a nil map, which panics the runtime on the
// first container that gets one; v0.12.0 fixed it.
var (
	nriFirstSysctl = version{0, 11, 0}
	nriFirstSafe   = version{0, 12, 0}
)

// runtimeLine maps a runtime's releases to the NRI they vendor, for runtimes
// that do not report it. Each entry is the first release from which its NRI
// is vendored, read from the releases' go.mod; test/e2e's
// TestVendoredNRIMatchesTheDocs holds it to each binary the suite builds.
type runtimeLine struct {
	from version
	nri  version
}

var vendoredNRI = map[string][]runtimeLine{
	"containerd": {
		{version{1, 7, 0}, version{0, 3, 0}},
		{version{1, 7, 26}, version{0, 8, 0}},
		{version{2, 0, 0}, version{0, 8, 0}},
		{version{2, 2, 0}, version{0, 10, 0}},
		{version{2, 2, 1}, version{0, 11, 0}},
		{version{2, 3, 0}, version{0, 12, 0}},
	},
	// No CRI-O release reports its NRI version (1.37, with NRI v0.12.0,
	// is not released).
	"cri-o": {
		{version{1, 30, 0}, version{0, 6, 0}},
		{version{1, 32, 0}, version{0, 9, 0}},
		{version{1, 34, 0}, version{0, 10, 0}},
		{version{1, 35, 0}, version{0, 11, 0}},
	},
}

// nriFirstFailurePolicy is the first NRI whose runtime side honours the
// failure policy a plugin declares in its Configure reply.
var nriFirstFailurePolicy = version{0, 12, 4}

// HonoursFailurePolicy tells whether the runtime's NRI honours a plugin's
// declared failure policy; known is false when its NRI cannot be told.
func HonoursFailurePolicy(rt Runtime) (honours, known bool) {
	nri, _, known := nriOf(rt)
	return known && nri.atLeast(nriFirstFailurePolicy), known
}

// nriOf is the NRI a runtime runs: reported, or from the release table.
// known is false when neither tells.
func nriOf(rt Runtime) (v version, source string, known bool) {
	if rt.NRIVersion != "" {
		if v, err := parse(rt.NRIVersion); err == nil {
			return v, "reported by the runtime", true
		}
	}
	lines := vendoredNRI[strings.ToLower(rt.Name)]
	if lines == nil {
		return version{}, "", false
	}
	rv, err := parse(rt.Version)
	if err != nil {
		return version{}, "", false
	}
	found := false
	for _, l := range lines {
		if rv.atLeast(l.from) {
			v, found = l.nri, true
		}
	}
	return v, "vendored by " + rt.Name + " " + rt.Version, found
}

// appliesSysctls lists the runtimes known to apply an NRI sysctl
// adjustment to the container's spec once their NRI carries it. CRI-O is
// left out: its 1.35 and 1.36 releases vendor NRI v0.11.0 (the panic), and
// no release with v0.12 exists yet (docs/modes-and-runtimes.md, "Compatibility").
var appliesSysctls = map[string]bool{"containerd": true}

// Decide picks the mode for a runtime. Spec mode only where the runtime is
// known to apply sysctl adjustments and its NRI does not crash on them;
// anything else, unknown or unparsable gets namespace mode: assuming the
// newer behaviour would leave pods at kernel defaults, or take the runtime
// down.
func Decide(rt Runtime) (Mode, string) {
	if !appliesSysctls[strings.ToLower(rt.Name)] {
		return Namespace, fmt.Sprintf("runtime %q is not known to apply NRI sysctl adjustments", rt.Name)
	}
	nri, source, known := nriOf(rt)
	if !known {
		return Namespace, fmt.Sprintf("cannot tell which NRI %s %q runs; assuming it cannot take sysctl adjustments", rt.Name, rt.Version)
	}
	switch {
	case nri.atLeast(nriFirstSafe):
		return Spec, fmt.Sprintf("NRI %s (%s) applies sysctl adjustments", nri, source)
	case nri.atLeast(nriFirstSysctl):
		return Namespace, fmt.Sprintf("NRI %s (%s) crashes the runtime on sysctl adjustments (fixed in NRI %s)", nri, source, nriFirstSafe)
	}
	return Namespace, fmt.Sprintf("NRI %s (%s) drops sysctl adjustments (they arrive in NRI %s)", nri, source, nriFirstSysctl)
}

// RefuseForced returns an error when the mode forced by flag or config
// would take the runtime down: spec mode on an NRI with the nil-map panic.
func RefuseForced(m Mode, rt Runtime) error {
	if m != Spec {
		return nil
	}
	nri, source, known := nriOf(rt)
	if known && nri.atLeast(nriFirstSysctl) && !nri.atLeast(nriFirstSafe) {
		return fmt.Errorf("refusing spec mode on %s: its NRI %s (%s) panics the runtime on the first sysctl adjustment (nil map in result.adjustSysctl, fixed in NRI %s); use mode namespace or auto", rt, nri, source, nriFirstSafe)
	}
	return nil
}

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

func (v version) String() string { return fmt.Sprintf("v%d.%d.%d", v[0], v[1], v[2]) }

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
