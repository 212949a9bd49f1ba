// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package install

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// docPages are the markdown pages whose relative links are checked: the
// front page, the changelog, every docs/ page and the chart's README.
func docPages(t *testing.T, root string) []string {
	t.Helper()
	pages := docsPages(t, root)
	for _, p := range []string{"README.md", "CHANGELOG.md", "config/helm/nri-sysctl/README.md"} {
		pages = append(pages, filepath.Join(root, p))
	}
	return pages
}

// pendingLinks are targets that pages on other branches add. A link to
// one is let through while it does not exist, and checked like any other
// once it does. Drop an entry when its page lands.
var pendingLinks = []string{}

var (
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	fenceStart = regexp.MustCompile("^\\s*(```|~~~)")
)

// proseLines returns the lines of a markdown file with those of fenced code
// blocks blanked, so that index i is line i+1.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	inFence := false
	for i, line := range lines {
		if fenceStart.MatchString(line) {
			inFence = !inFence
			lines[i] = ""
		} else if inFence {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchor is the anchor GitHub gives a heading: lower case, every
// character but letters, digits, '-', '_' and spaces dropped, spaces as '-'.
func headingAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// anchors lists the heading anchors of a markdown file, a repeated heading
// getting -1, -2, ... as on GitHub.
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, line := range proseLines(text) {
		trimmed := strings.TrimLeft(line, "#")
		if len(trimmed) == len(line) || len(line)-len(trimmed) > 6 || !strings.HasPrefix(trimmed, " ") {
			continue
		}
		a := headingAnchor(trimmed)
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// Every relative link in the docs names a file of the repository, and
// every #anchor a heading of its page, so a moved or renamed section
// breaks `make unit`, not a reader's click.
func TestDocLinksResolve(t *testing.T) {
	root := repoRoot(t)
	anchorCache := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchorCache[path]; ok {
			return a, nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		anchorCache[path] = anchors(string(data))
		return anchorCache[path], nil
	}
	checked := 0
	for _, page := range docPages(t, root) {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		rel, _ := filepath.Rel(root, page)
		for i, line := range proseLines(string(data)) {
			for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				file, anchor, _ := strings.Cut(target, "#")
				path := page
				if file != "" {
					path = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
				}
				repoPath, _ := filepath.Rel(root, path)
				key := filepath.ToSlash(repoPath)
				if anchor != "" {
					key += "#" + anchor
				}
				if _, err := os.Stat(path); err != nil {
					if slices.Contains(pendingLinks, filepath.ToSlash(repoPath)) {
						t.Logf("%s: link %s: page not written yet (pending)", rel, target)
						continue
					}
					t.Errorf("%s (line %d): link %s: no such file %s", rel, i+1, target, repoPath)
					continue
				}
				if anchor == "" || !strings.HasSuffix(path, ".md") {
					continue
				}
				a, err := anchorsOf(path)
				if err != nil {
					t.Errorf("%s: link %s: %v", rel, target, err)
					continue
				}
				if !a[anchor] {
					if slices.Contains(pendingLinks, key) {
						t.Logf("%s: link %s: section not written yet (pending)", rel, target)
						continue
					}
					t.Errorf("%s (line %d): link %s: %s has no heading with anchor #%s", rel, i+1, target, repoPath, anchor)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found: the link pattern is broken")
	}
	t.Logf("%d relative links checked", checked)
}

func TestHeadingAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		" Moving to kubelet's defaultPodSysctls, or running both": "moving-to-kubelets-defaultpodsysctls-or-running-both",
		" audit: which running containers lack the defaults":      "audit-which-running-containers-lack-the-defaults",
		" Results: metrics on, quiet machine, 2026-11-30":         "results-metrics-on-quiet-machine-2026-11-30",
		" What `make test-all` runs":                              "what-make-test-all-runs",
		" Importing CRI-O's default_sysctls":                      "importing-cri-os-default_sysctls",
	} {
		if got := headingAnchor(heading); got != want {
			t.Errorf("headingAnchor(%q) = %q, want %q", heading, got, want)
		}
	}
	got := anchors("# A\n## A\n```\n# not a heading\n```\n#not one either\n## B\n")
	want := map[string]bool{"a": true, "a-1": true, "b": true}
	if len(got) != len(want) {
		t.Errorf("anchors = %v, want %v", got, want)
	}
	for a := range want {
		if !got[a] {
			t.Errorf("anchors = %v, want %v", got, want)
		}
	}
}
