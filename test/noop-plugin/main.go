// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Command noop-plugin is the floor for any NRI plugin in the benchmarks: it
// subscribes to the same events as nri-sysctl and never adjusts anything,
// so its cost is the ttrpc round trips alone. With -set-sysctl it plays
// another plugin that sets a sysctl, for the end-to-end tests.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type noop struct {
	setKey, setValue string
}

func (noop) RunPodSandbox(context.Context, *api.PodSandbox) error    { return nil }
func (noop) RemovePodSandbox(context.Context, *api.PodSandbox) error { return nil }
func (n noop) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if n.setKey == "" {
		return nil, nil, nil
	}
	adj := &api.ContainerAdjustment{}
	adj.SetLinuxSysctl(n.setKey, n.setValue)
	return adj, nil, nil
}

func main() {
	socket := flag.String("nri-socket", api.DefaultSocketPath, "NRI socket")
	idx := flag.String("plugin-idx", "90", "plugin index")
	name := flag.String("plugin-name", "noop", "plugin name")
	set := flag.String("set-sysctl", "", "key=value to set on every container")
	flag.Parse()
	var p noop
	if *set != "" {
		var ok bool
		if p.setKey, p.setValue, ok = strings.Cut(*set, "="); !ok {
			fmt.Fprintln(os.Stderr, "-set-sysctl wants key=value")
			os.Exit(2)
		}
	}
	s, err := stub.New(p, stub.WithPluginName(*name), stub.WithPluginIdx(*idx), stub.WithSocketPath(*socket))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := s.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "registered with NRI")
	s.Wait()
}
