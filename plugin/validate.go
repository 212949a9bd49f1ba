package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/probe"
)

// validateFlags declares validate's flags.
func validateFlags(fs *flag.FlagSet) func([]string, io.Writer, io.Writer) int {
	path := fs.String("config", config.DefaultPath, "config file to check")
	skip := fs.Bool("skip-kernel-check", false, "leave out the probe of this kernel (for image builds on another kernel)")
	return func(_ []string, stdout, stderr io.Writer) int { return runValidate(*path, *skip, stdout, stderr) }
}

func runValidate(path string, skip bool, stdout, stderr io.Writer) int {
	cfg, err := config.Load(path, kernelChecker(skip))
	if err == nil && !skip && len(cfg.AllKeys()) > 0 {
		// What the plugin checks at start, for user-namespace pods.
		var problems config.Problems
		if _, uerr := checkUserNamespace(cfg); errors.As(uerr, &problems) {
			err = problems
		} else if uerr != nil {
			fmt.Fprintf(stderr, "warning: cannot tell which values user-namespace pods may be given: %v\n", uerr)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: valid (%d default(s), %d rule(s), %d profile(s))\n", path, len(cfg.Sysctls), len(cfg.Rules), len(cfg.Profiles))
	for _, e := range cfg.KeptInAnotherForm() {
		fmt.Fprintf(stdout, "%s:%d: %s: the kernel keeps %q as %q; pods get %s\n", path, e.Line, e.Key, e.Written, e.Value, e.Value)
	}
	printInheritance(stdout, cfg)
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(stderr, "warning: %v\n", w)
	}
	return 0
}

func kernelChecker(skip bool) config.KernelChecker {
	if skip {
		return nil
	}
	return probe.Kernel
}
