package main

import (
	"io"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
)

func TestResolveContainerd(t *testing.T) {
	parse := func(args ...string) options {
		t.Helper()
		o, err := parseRunFlags(args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	fromConfig := &config.Config{ContainerdAddress: "/run/k3s/containerd/containerd.sock", ContainerdNamespace: "other"}
	for _, tc := range []struct {
		name string
		o    options
		cfg  *config.Config
		want containerdTarget
	}{
		{"defaults", parse(), &config.Config{}, containerdTarget{"/run/containerd/containerd.sock", "k8s.io"}},
		{"config over defaults", parse(), fromConfig, containerdTarget{"/run/k3s/containerd/containerd.sock", "other"}},
		{"flags over config", parse("--containerd-address", "/a.sock", "--containerd-namespace", "ns"), fromConfig, containerdTarget{"/a.sock", "ns"}},
		{"flag given with its default value still wins", parse("--containerd-address", "/run/containerd/containerd.sock"), fromConfig, containerdTarget{"/run/containerd/containerd.sock", "other"}},
	} {
		if got := resolveContainerd(tc.o, tc.cfg); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
