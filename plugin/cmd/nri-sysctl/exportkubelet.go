package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/kubeletexport"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// exportKubeletFlags declares export-kubelet's flags.
func exportKubeletFlags(fs *flag.FlagSet) func([]string, io.Writer, io.Writer) int {
	path := fs.String("config", config.DefaultPath, "config file to export")
	skip := fs.Bool("skip-kernel-check", false, "leave out the probes of this kernel (then inheritFromHost cannot be exported, and the keys hostUsers: false pods cannot be given are not named)")
	return func(args []string, stdout, stderr io.Writer) int {
		if len(args) > 0 {
			fs.Usage()
			return 2
		}
		return runExportKubelet(*path, *skip, stdout, stderr)
	}
}

// runExportKubelet prints the config's node-wide defaults as a
// KubeletConfiguration drop-in. It checks the config as validate does,
// reading inherited values from the host's namespaces as the plugin does,
// and refuses a bad one with validate's messages.
func runExportKubelet(path string, skip bool, stdout, stderr io.Writer) int {
	checked, err := loadChecked(path, skip, stderr)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	out, err := kubeletexport.Fragment(kubeletexport.Input{
		Config:               checked.cfg,
		UserNamespaceProbed:  checked.probed,
		UserNamespaceRefused: checked.userNS.Refused[sysctl.WriterInPod],
	})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprint(stdout, out)
	for _, w := range checked.cfg.Warnings() {
		fmt.Fprintf(stderr, "warning: %v\n", w)
	}
	return 0
}
