// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package policy

// SkipCode is why a configured key does not reach a container. Its table
// below gives each code its metric label and its text; Skipped.Reason is
// that text with the case's detail.
type SkipCode uint8

const (
	// SkipHostNamespace: the pod shares the host's namespace of the key.
	SkipHostNamespace SkipCode = iota
	// SkipPodOwn: the pod sets the key itself.
	SkipPodOwn
	// SkipExisting: the runtime or a lower-index plugin set it already.
	SkipExisting
	// SkipUserNamespace: the kernel refuses the key inside the pod's user
	// namespace, or a GID range has no GID mapped there.
	SkipUserNamespace
	// SkipWriteFailed: namespace mode could not write the key into the
	// pod's namespaces. The writer reports it; Decide never does.
	SkipWriteFailed
	// SkipConvergence: the pod's values were in place before the
	// container (podRecord.inPlace), and the plugin has not set this one
	// there: only a convergence, which reads the pod first, may. The
	// plugin reports it; Decide never does.
	SkipConvergence
	// SkipProfileUnknown: the pod asked for a profile the config lacks.
	// Its Skipped.Key is ProfileKeyPrefix and the name, not a sysctl.
	SkipProfileUnknown
	// SkipProfileNotAllowed: the profile's allow lists leave the pod out.
	SkipProfileNotAllowed
	// SkipProfilesRefused: the profiles annotation is over a bound
	// (policy.MaxProfilesAnnotationBytes, MaxProfilesAsked) or names what
	// no profile can be called; no profile is taken from it. Its
	// Skipped.Key is the annotation's name.
	SkipProfilesRefused

	// NumSkipCodes counts the codes, for tables indexed by code.
	NumSkipCodes = iota
)

// skipCodes gives each code its metric label and its reason's text,
// stable for logs and tests. A skip is made only through Skip, so that
// code and text go together.
var skipCodes = [NumSkipCodes]struct{ label, text string }{
	SkipHostNamespace:     {"host_namespace", "pod shares the host's namespace"},
	SkipPodOwn:            {"pod_own", "pod sets it itself"},
	SkipExisting:          {"existing", "already set on the container (runtime or another plugin)"},
	SkipUserNamespace:     {"user_namespace", "cannot be set in the pod's user namespace"},
	SkipWriteFailed:       {"write_failed", "write failed"},
	SkipConvergence:       {"convergence", "left to convergence: the pod was running before the container"},
	SkipProfileUnknown:    {"profile_unknown", "no such profile"},
	SkipProfileNotAllowed: {"profile_not_allowed", "not allowed"},
	SkipProfilesRefused:   {"profiles_refused", "no profile applied: the annotation"},
}

// Skip is key skipped for this code; its reason is the code's text, then
// detail (which brings its own separator, such as " (net)" or ": ...").
func (c SkipCode) Skip(key, detail string) Skipped {
	return Skipped{Key: key, Code: c, Reason: skipCodes[c].text + detail}
}

// Profile tells whether the code is about a profile, not a sysctl: such a
// skip is counted by nri_sysctl_profiles_total, not with the sysctls.
func (c SkipCode) Profile() bool {
	return c == SkipProfileUnknown || c == SkipProfileNotAllowed || c == SkipProfilesRefused
}

// Label names the code in metrics (nri_sysctl_sysctls_skipped_total{reason}).
func (c SkipCode) Label() string { return skipCodes[c].label }

// String is the code's reason without its detail.
func (c SkipCode) String() string { return skipCodes[c].text }
