// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Command packages builds nri-sysctl's .deb and .rpm packages with nfpm
// (github.com/goreleaser/nfpm/v2), one per format and architecture:
//
//	go run . -repo ../.. -bin-dir ../../bin -out ../../bin/packages \
//	    -deb-version 0.2.0 -rpm-version 0.2.0 -arches amd64,arm64 -formats deb,rpm
//
// The binaries come from -bin-dir/<arch>/nri-sysctl (make packages builds
// them). What goes where is the table in layout.go; the maintainer scripts
// are scripts/deb and scripts/rpm. It lives in a module of its own so that
// nfpm and what it pulls in stay out of the plugin's go.mod.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	var o options
	flag.StringVar(&o.repo, "repo", "../..", "the repository's root (units, config, docs)")
	flag.StringVar(&o.binDir, "bin-dir", "../../bin", "directory with <arch>/nri-sysctl")
	flag.StringVar(&o.out, "out", "../../bin/packages", "directory to write the packages to")
	flag.StringVar(&o.debVersion, "deb-version", "", "the package version for .deb (make's DEB_VERSION)")
	flag.StringVar(&o.rpmVersion, "rpm-version", "", "the package version for .rpm (make's RPM_VERSION)")
	flag.StringVar(&o.config, "config", "", "the shipped config file (default: <repo>/config/config.yaml)")
	arches := flag.String("arches", "amd64,arm64", "comma-separated GOARCH values")
	formats := flag.String("formats", "deb,rpm", "comma-separated package formats (deb, rpm)")
	epoch := flag.String("source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "file times and changelog date, in Unix seconds (reproducible packages)")
	flag.Parse()
	o.arches = splitList(*arches)
	o.formats = splitList(*formats)
	if *epoch != "" {
		sec, err := strconv.ParseInt(*epoch, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "packages: -source-date-epoch %q: %v\n", *epoch, err)
			os.Exit(2)
		}
		o.mtime = time.Unix(sec, 0).UTC()
	}
	written, err := build(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "packages:", err)
		os.Exit(1)
	}
	for _, p := range written {
		fmt.Println(p)
	}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
