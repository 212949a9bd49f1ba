// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package install

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pageBudgets caps the contributors' pages that grew into diaries: each
// says what holds now, and git log keeps how it was reached.
var pageBudgets = map[string]int{
	"docs/testing.md":    250,
	"docs/benchmarks.md": 400,
}

func TestDocsWithinTheirBudget(t *testing.T) {
	root := repoRoot(t)
	for page, budget := range pageBudgets {
		text, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(text), "\n"); n > budget {
			t.Errorf("%s has %d lines, over its budget of %d: keep the latest figures (with date and commit) and drop their history", page, n, budget)
		}
	}
}

var (
	// A run, stop or session named by its order ("the eighth stop",
	// "run 2") narrates how a figure was reached; a run is named by its
	// date and commit.
	ordinal       = `(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|\d+(?:st|nd|rd|th))`
	narratedRun   = regexp.MustCompile(`(?i)\b` + ordinal + `\s+(?:\S+\s+)?(?:run|stop|session)\b|\b(?:run|stop|session)s?\s+\d{1,2}(?:\s+(?:to|and)\s+\d{1,2})?(?:[^,.\d]|$)`)
	trackerNumber = regexp.MustCompile(`(?i)\bissues?\s+#?\d+\b`)
)

// The user and contributor pages speak of behaviour, versions, dates and
// commits; a reader cannot open this tracker's issue numbers.
func TestDocsNarrateNoRuns(t *testing.T) {
	root := repoRoot(t)
	for _, page := range docPages(t, root) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, page)
		for i, line := range proseLines(string(text)) {
			if m := narratedRun.FindString(line); m != "" {
				t.Errorf("%s:%d: %q names a run by its order: name it by its date and commit", rel, i+1, m)
			}
			if m := trackerNumber.FindString(line); m != "" {
				t.Errorf("%s:%d: %q: the repository's readers cannot open the tracker's issues; say what changed", rel, i+1, m)
			}
		}
	}
}

func TestNarratedRunPatterns(t *testing.T) {
	for line, want := range map[string]bool{
		"The eighth stop's machine": true,
		"Thirteenth stop":           true,
		"Run 1 found a container":   true,
		"in the second soak run":    true,
		"the first run's figures":   true,
		"the 2nd session":           true,
		"a run of 2026-12-07":       false,
		"two runs at 40 pods":       false,
		"the first container":       false,
		"runs 2,000 pods":           false,
		"runs 1 to 4 below":         true,
		"the first boot runs":       false,
	} {
		if got := narratedRun.MatchString(line); got != want {
			t.Errorf("narratedRun.MatchString(%q) = %v, want %v", line, got, want)
		}
	}
	for line, want := range map[string]bool{"see issue 35": true, "issues #33": true, "golang/go#75804": false} {
		if got := trackerNumber.MatchString(line); got != want {
			t.Errorf("trackerNumber.MatchString(%q) = %v, want %v", line, got, want)
		}
	}
}
