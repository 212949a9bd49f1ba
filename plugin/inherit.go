// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"fmt"
	"maps"
	"slices"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/sirupsen/logrus"
)

// notInherited stands for a key that a config does not inherit, in the log
// line of a changed host value.
const notInherited = "(not inherited)"

// checkInheritanceExpanded refuses a config whose inheritFromHost was not
// expanded: only the kernel probe, which --skip-kernel-check turns off, can
// tell which of the host's sysctls a pod can be given.
func checkInheritanceExpanded(cfg *config.Config) error {
	if len(cfg.InheritFromHost) > 0 && !cfg.InheritExpanded {
		return fmt.Errorf("%s: inheritFromHost needs the kernel probe to tell which of the host's sysctls a pod can be given; run the plugin without --skip-kernel-check", cfg.Source)
	}
	return nil
}

// logInheritance logs what each inheritFromHost entry brought, and, on a
// reload, each inherited host value that changed since the previous config
// (someone ran sysctl -w or sysctl --system).
func logInheritance(log logrus.FieldLogger, prev, cfg *config.Config) {
	brought := map[string]int{}
	for _, e := range cfg.Inherited() {
		brought[e.Pattern]++
	}
	for _, in := range cfg.InheritFromHost {
		// matched counts keys that an explicit value, or an earlier
		// entry, took; inherited only those whose host value is used.
		log.WithFields(logrus.Fields{"entry": in.Pattern, "line": in.Line, "matched": len(in.Keys), "inherited": brought[in.Pattern], "left_out": in.LeftOut}).Info("inheriting the host's sysctls")
	}
	before, after := inheritedValues(prev), inheritedValues(cfg)
	if len(before) == 0 {
		// First load, or nothing was inherited before: no change to report.
		return
	}
	keys := slices.Sorted(maps.Keys(before))
	for k := range after {
		if _, ok := before[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		old, ok := before[k]
		if !ok {
			old = notInherited
		}
		now, ok := after[k]
		if !ok {
			now = notInherited
		}
		if old != now {
			log.WithFields(logrus.Fields{"key": k, "old": old, "new": now}).Info("inherited host value changed")
		}
	}
}

func inheritedValues(cfg *config.Config) map[string]string {
	out := map[string]string{}
	if cfg == nil {
		return out
	}
	for _, e := range cfg.Inherited() {
		out[e.Key] = e.Value
	}
	return out
}
