package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/crioimport"
)

// runImportCRIO prints an nri-sysctl config holding a CRI-O config's
// default_sysctls. It exits 1 when entries were left out (they are in the
// output as comments, and on stderr), or when there was nothing to import.
func runImportCRIO(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("nri-sysctl import-crio", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: nri-sysctl import-crio PATH\n\nPrints an nri-sysctl config with the [crio.runtime] default_sysctls of a CRI-O\nconfig (crio.conf or a crio.conf.d drop-in). Entries nri-sysctl would refuse\nare printed as comments with the reason, and the exit code is then 1.")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	path := fs.Arg(0)
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
