// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/crioimport"
)

// importCRIOFlags: import-crio takes its file as its one argument.
func importCRIOFlags(*flag.FlagSet) func([]string, io.Writer, io.Writer) int {
	return func(args []string, stdout, stderr io.Writer) int {
		return runImportCRIO(args[0], stdout, stderr)
	}
}

// runImportCRIO prints an nri-sysctl config holding a CRI-O config's
// default_sysctls. It exits 1 when entries were left out (they are in the
// output as comments, and on stderr), or when there was nothing to import.
func runImportCRIO(path string, stdout, stderr io.Writer) int {
	data, err := config.ReadFile(path)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", path, err)
		return 1
	}
	res, err := crioimport.Convert(path, data)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprint(stdout, res.YAML)
	for _, p := range res.Problems {
		fmt.Fprintf(stderr, "left out: %v\n", p)
	}
	if len(res.Problems) > 0 {
		return 1
	}
	return 0
}
