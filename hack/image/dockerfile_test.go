// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The Dockerfile is built by no test here (there is no daemon), so this
// checks what would break it: its go build names a main package, the one
// the Makefile builds, and every package of this module that the binary
// compiles is under a directory the Dockerfile copies.
func TestDockerfileBuildsTheBinary(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dockerfile := readFile(t, filepath.Join(root, "Dockerfile"))
	build := regexp.MustCompile(`(?m)^RUN .*\bgo build .* -o \S+ (\./\S+)\s*$`).FindStringSubmatch(dockerfile)
	if build == nil {
		t.Fatal("Dockerfile: no `RUN ... go build ... -o OUT ./PACKAGE` line")
	}
	pkg := build[1]
	makefile := readFile(t, filepath.Join(root, "Makefile"))
	if !regexp.MustCompile(`(?m)^go_build = .* ` + regexp.QuoteMeta(pkg) + `\s*$`).MatchString(makefile) {
		t.Errorf("Dockerfile builds %s, the Makefile's go_build another package", pkg)
	}
	if name := goList(t, root, "{{.Name}}", pkg); name != "main" {
		t.Fatalf("Dockerfile builds %s, package %q: want package main", pkg, name)
	}
	var copied []string
	for _, m := range regexp.MustCompile(`(?m)^COPY (\S+/) \S+/\s*$`).FindAllStringSubmatch(dockerfile, -1) {
		copied = append(copied, m[1])
	}
	module := goList(t, root, "{{.Module.Path}}", pkg)
	for _, dep := range strings.Fields(goList(t, root, `{{join .Deps "\n"}}`, pkg)) {
		rel, ok := strings.CutPrefix(dep, module+"/")
		if !ok {
			continue
		}
		in := false
		for _, dir := range copied {
			in = in || strings.HasPrefix(rel+"/", dir)
		}
		if !in {
			t.Errorf("the binary compiles %s, which the Dockerfile does not copy (it copies %v)", rel, copied)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// goList runs go list -f format on pkg in the repository's module.
func goList(t *testing.T, root, format, pkg string) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", format, pkg)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	return strings.TrimSpace(string(out))
}
