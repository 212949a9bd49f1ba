// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package testall

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The cases make e2e runs on every line (E2E_LINE_CASES) are top-level
// tests of test/e2e: a renamed or removed test must not drop out of the
// older lines unnoticed, and docs/testing.md names each one.
func TestLineCasesAreTests(t *testing.T) {
	makefile := read(t, "../../Makefile")
	m := regexp.MustCompile(`(?m)^E2E_LINE_CASES = \^\(([^)]*)\)\$\$$`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatal("Makefile: no E2E_LINE_CASES = ^(A|B|...)$$ line")
	}
	files, err := filepath.Glob("../e2e/*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no e2e tests found: %v", err)
	}
	var e2e strings.Builder
	for _, f := range files {
		e2e.WriteString(read(t, f))
	}
	doc := read(t, "../../docs/testing.md")
	for _, name := range strings.Split(m[1], "|") {
		if !regexp.MustCompile(`(?m)^func ` + regexp.QuoteMeta(name) + `\(t \*testing\.T\)`).MatchString(e2e.String()) {
			t.Errorf("E2E_LINE_CASES names %s, which is no top-level test in test/e2e", name)
		}
		if !strings.Contains(doc, "`"+name+"`") {
			t.Errorf("docs/testing.md does not say why %s runs on every line", name)
		}
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
