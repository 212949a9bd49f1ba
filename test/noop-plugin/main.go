// Command noop-plugin is the floor for any NRI plugin in the benchmarks: it
// subscribes to the same events as nri-sysctl and never adjusts anything,
// so its cost is the ttrpc round trips alone.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type noop struct{}

func (noop) RunPodSandbox(context.Context, *api.PodSandbox) error    { return nil }
func (noop) RemovePodSandbox(context.Context, *api.PodSandbox) error { return nil }
func (noop) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	return nil, nil, nil
}

func main() {
	socket := flag.String("nri-socket", api.DefaultSocketPath, "NRI socket")
	idx := flag.String("plugin-idx", "90", "plugin index")
	flag.Parse()
	s, err := stub.New(noop{}, stub.WithPluginName("noop"), stub.WithPluginIdx(*idx), stub.WithSocketPath(*socket))
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
