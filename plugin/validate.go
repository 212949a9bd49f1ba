package main

import (
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
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: valid (%d default(s), %d rule(s))\n", path, len(cfg.Sysctls), len(cfg.Rules))
	printInheritance(stdout, cfg)
	return 0
}

func kernelChecker(skip bool) config.KernelChecker {
	if skip {
		return nil
	}
	return probe.Kernel
}
