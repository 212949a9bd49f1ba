// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package project checks the project's own files: the licence, and the
// licence line in each source file.
package project

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// root is the repository's top directory.
const root = "../.."

// licenceLine is what every source file says near its top.
const licenceLine = "SPDX-License-Identifier: Apache-2.0"

// apacheLicenceSHA256 is the digest of the Apache License 2.0 text as the
// Apache Software Foundation publishes it (LICENSE-2.0.txt), which LICENSE
// holds unchanged.
const apacheLicenceSHA256 = "c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4"

func TestLicenceIsApache2(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != apacheLicenceSHA256 {
		t.Errorf("LICENSE is not the Apache License 2.0 text as published (sha256 %x)", sum)
	}
}

// isSource tells whether path is a file that must carry the licence line:
// Go, shell scripts (by name or by their #! line), the Makefile and the
// Dockerfile.
func isSource(path string) bool {
	switch name := filepath.Base(path); {
	case strings.HasSuffix(name, ".go"), strings.HasSuffix(name, ".sh"), name == "Makefile", name == "Dockerfile":
		return true
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	first, _ := bufio.NewReader(f).ReadString('\n')
	return strings.HasPrefix(first, "#!/bin/sh") || strings.HasPrefix(first, "#!/usr/bin/env bash") || strings.HasPrefix(first, "#!/bin/bash")
}

// hasLicenceLine tells whether the licence line is in the file's first
// five lines.
func hasLicenceLine(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for i := 0; i < 5 && s.Scan(); i++ {
		if strings.Contains(s.Text(), licenceLine) {
			return true, nil
		}
	}
	return false, s.Err()
}

// Every source file of every module here carries the licence line.
func TestEverySourceFileCarriesTheLicenceLine(t *testing.T) {
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == ".git" || name == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !isSource(path) {
			return nil
		}
		checked++
		ok, err := hasLicenceLine(path)
		if err != nil {
			return err
		}
		if !ok {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s: no %q in its first five lines", rel, licenceLine)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 200 {
		t.Errorf("checked %d files: the walk missed the tree", checked)
	}
}

// The packages name the licence and the copyright holder; Debian's refers
// to the system's copy of the licence (lintian refuses the full text).
func TestPackagesNameTheLicence(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "hack/packages/files/copyright"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/", "Copyright: 2026 The nri-sysctl Authors", "License: Apache-2.0", "/usr/share/common-licenses/Apache-2.0"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("hack/packages/files/copyright lacks %q", want)
		}
	}
}

// The project files a newcomer and a reporter look for exist.
func TestProjectFilesExist(t *testing.T) {
	for _, name := range []string{"LICENSE", "SECURITY.md", "CONTRIBUTING.md"} {
		if _, err := os.Stat(filepath.Join(root, name)); err != nil {
			t.Error(err)
		}
	}
}
