// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Command notices writes the third-party notices of the binary: for each
// Go module compiled into it, as a CycloneDX SBOM of the binary lists them
// (cyclonedx-gomod app -licenses, one SBOM per architecture), its licence
// and the licence texts the module ships. It fails, naming the module,
// when a module's licence is unknown or not one of those allowed; a
// licence the generator misreads is set in the overrides file, with the
// reason.
//
// Each SBOM is checked first against its binary: it must name every
// module the binary's build information lists, and no other.
//
//	go run ./hack/notices -overrides hack/notices/overrides.txt -out NOTICES ARCH=SBOM.json:BINARY...
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	overrides := flag.String("overrides", "hack/notices/overrides.txt", "`FILE` of licences set by hand: MODULE LICENCE REASON per line")
	out := flag.String("out", "", "write the notices to `FILE` (required)")
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: notices -out FILE [-overrides FILE] SBOM.json:BINARY...")
		os.Exit(2)
	}
	if err := run(flag.Args(), *overrides, *out); err != nil {
		fmt.Fprintln(os.Stderr, "notices:", err)
		os.Exit(1)
	}
}

func run(pairs []string, overridesPath, out string) error {
	var sboms []string
	for _, pair := range pairs {
		sbom, binary, ok := strings.Cut(pair, ":")
		if !ok {
			return fmt.Errorf("%q: want SBOM.json:BINARY", pair)
		}
		if err := checkAgainstBinary(sbom, binary); err != nil {
			return err
		}
		sboms = append(sboms, sbom)
	}
	modules, err := readSBOMs(sboms)
	if err != nil {
		return err
	}
	overrides, err := readOverrides(overridesPath)
	if err != nil {
		return err
	}
	if err := decideLicences(modules, overrides); err != nil {
		return err
	}
	text, err := notices(modules, moduleDir)
	if err != nil {
		return err
	}
	return os.WriteFile(out, []byte(text), 0o644)
}
