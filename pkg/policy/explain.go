// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// Explain is what a pod with in's attributes gets, as lines of text (the
// explain command): one line per configured key (sorted, the order the
// decision walks them), then the rules that matched in the order they
// apply, then the profiles the pod asked for, then the exclusion.
func Explain(cfg *config.Config, refused UserNamespaceRefusals, in Input) []string {
	pol := Compile(cfg, refused)
	d := pol.Decide(in)
	var lines []string
	for _, key := range cfg.AllKeys() {
		switch i, j := slices.IndexFunc(d.Apply, func(s sysctl.Sysctl) bool { return s.Key() == key }),
			slices.IndexFunc(d.Skipped, func(s Skipped) bool { return s.Key == key }); {
		case i >= 0:
			lines = append(lines, fmt.Sprintf("%s %s applied", key, d.Apply[i].Value()))
		case j >= 0:
			lines = append(lines, fmt.Sprintf("%s %s skipped (%s)", key, d.Skipped[j].Value, d.Skipped[j].Reason))
		case d.Excluded != "":
			lines = append(lines, fmt.Sprintf("%s - skipped (pod excluded: %s)", key, d.Excluded))
		default:
			lines = append(lines, fmt.Sprintf("%s - not set (no default and no matching rule)", key))
		}
	}
	switch rules := pol.MatchedRules(in.Pod); {
	case d.Excluded != "":
		lines = append(lines, "rules: not applied (the pod is excluded)")
	case len(rules) == 0:
		lines = append(lines, "rules: none match")
	default:
		lines = append(lines, "rules: "+strings.Join(rules, ", ")+" (in this order; a later rule overrides an earlier one)")
	}
	lines = append(lines, explainProfiles(d, in.Pod))
	if d.Excluded != "" {
		lines = append(lines, "excluded: yes, by "+d.Excluded)
	} else {
		lines = append(lines, "excluded: no")
	}
	return lines
}

// explainProfiles says what became of each profile the pod asked for, in
// the order they apply, with the reason as the skipped annotation gives it.
func explainProfiles(d Decision, pod Pod) string {
	_, asked := pod.Annotations[config.ProfilesAnnotation]
	switch {
	case !asked:
		return "profiles: none asked for (" + config.ProfilesAnnotation + ")"
	case d.Excluded != "":
		return "profiles: not applied (the pod is excluded)"
	case d.ProfilesRefused() != "":
		return "profiles: refused (" + d.ProfilesRefused() + "); the pod gets the defaults and rules without profiles"
	case len(d.ProfilesAsked) == 0:
		return "profiles: none asked for (" + config.ProfilesAnnotation + " names none)"
	}
	parts := make([]string, len(d.ProfilesAsked))
	for i, r := range d.Profiles() {
		parts[i] = r.Name + " applied"
		if r.Result != ProfileApplied {
			parts[i] = r.Name + " skipped (" + r.Reason + ")"
		}
	}
	return "profiles: " + strings.Join(parts, ", ") + " (in this order; a later profile overrides an earlier one)"
}
