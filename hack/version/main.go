// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Command version prints the project's one version (the file VERSION at the
// repository root) in the form each format wants: the Makefile calls it for
// the binary, the packages, the image tag and the chart.
//
//	go run ./hack/version [-file VERSION | -version X.Y.Z] FORMAT
//
// FORMAT is one of semver, deb, rpm, oci, helm.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	file := flag.String("file", envOr("VERSION_FILE", "VERSION"), "the file that holds the semantic version")
	given := flag.String("version", "", "the semantic version itself, instead of the file's (make VERSION=...)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: version [-file VERSION | -version X.Y.Z] {%s}\n", strings.Join(formatNames(), "|"))
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	source, text := "-version", *given
	if text == "" {
		data, err := os.ReadFile(*file)
		if err != nil {
			fmt.Fprintln(os.Stderr, "version:", err)
			os.Exit(1)
		}
		source, text = *file, string(data)
	}
	out, err := Format(strings.TrimSpace(text), flag.Arg(0))
	if err != nil {
		fmt.Fprintf(os.Stderr, "version: %s: %v\n", source, err)
		os.Exit(1)
	}
	fmt.Println(out)
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
