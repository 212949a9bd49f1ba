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
// stable for logs and tests, and a profile's skip its result in
// nri_sysctl_profiles_total. A skip is made only through Skip, so that
// code and text go together.
var skipCodes = [NumSkipCodes]struct {
	label, text string
	profile     ProfileOutcome
}{
	SkipHostNamespace:     {label: "host_namespace", text: "pod shares the host's namespace"},
	SkipPodOwn:            {label: "pod_own", text: "pod sets it itself"},
	SkipExisting:          {label: "existing", text: "already set on the container (runtime or another plugin)"},
	SkipUserNamespace:     {label: "user_namespace", text: "cannot be set in the pod's user namespace"},
	SkipWriteFailed:       {label: "write_failed", text: "write failed"},
	SkipConvergence:       {label: "convergence", text: "left to convergence: the pod was running before the container"},
	SkipProfileUnknown:    {label: "profile_unknown", text: "no such profile", profile: ProfileUnknown},
	SkipProfileNotAllowed: {label: "profile_not_allowed", text: "not allowed", profile: ProfileNotAllowed},
	SkipProfilesRefused:   {label: "profiles_refused", text: "no profile applied: the annotation", profile: ProfileRefused},
}

// Skip is key skipped for this code; its reason is the code's text, then
// detail (which brings its own separator, such as " (net)" or ": ...").
func (c SkipCode) Skip(key, detail string) Skipped {
	return Skipped{Key: key, Code: c, Reason: skipCodes[c].text + detail}
}

// Profile tells whether the code is about a profile, not a sysctl: such a
// skip is counted by nri_sysctl_profiles_total, not with the sysctls.
func (c SkipCode) Profile() bool { return skipCodes[c].profile != "" }

// ProfileOutcome is a profile's skip as a result of
// nri_sysctl_profiles_total; "" for a sysctl's.
func (c SkipCode) ProfileOutcome() ProfileOutcome { return skipCodes[c].profile }

// Label names the code in metrics (nri_sysctl_sysctls_skipped_total{reason}).
func (c SkipCode) Label() string { return skipCodes[c].label }

// String is the code's reason without its detail.
func (c SkipCode) String() string { return skipCodes[c].text }
