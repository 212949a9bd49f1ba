// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/nri-sysctl/nri-sysctl/pkg/kubeletexport"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// exportKubeletFlags declares export-kubelet's flags.
func exportKubeletFlags(fs *flag.FlagSet) func([]string, io.Writer, io.Writer) int {
	var path string
	var skip bool
	declareConfig(fs, &path)
	declareSkipKernelCheck(fs, &skip)
	return func(_ []string, stdout, stderr io.Writer) int {
		return runExportKubelet(path, skip, stdout, stderr)
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
