// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package outcome

import "testing"

// Each outcome has a name that parses back to it, and its columns agree:
// one that heals was decided; one that was undecided neither was decided
// nor heals, and says why the container lacks the defaults.
func TestTable(t *testing.T) {
	for o := range Outcome(Count) {
		if got, ok := Parse(o.String()); !ok || got != o {
			t.Errorf("Parse(%q) = %v, %v", o.String(), got, ok)
		}
		if o.Heals() && !o.Decided() {
			t.Errorf("%s heals but was not decided", o)
		}
		if o.Undecided() && (o.Decided() || o.Heals() || o.Lacking() == "") {
			t.Errorf("%s: undecided, but decided %v, heals %v, lacking %q", o, o.Decided(), o.Heals(), o.Lacking())
		}
	}
	if _, ok := Parse("maybe"); ok {
		t.Error(`Parse("maybe") found an outcome`)
	}
}
