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
		name     string
		o        options
		cfg      *config.Config
		want     containerdTarget
		explicit bool
	}{
		{"defaults", parse(), &config.Config{}, containerdTarget{"/run/containerd/containerd.sock", "k8s.io"}, false},
		{"config over defaults", parse(), fromConfig, containerdTarget{"/run/k3s/containerd/containerd.sock", "other"}, true},
		{"flags over config", parse("--containerd-address", "/a.sock", "--containerd-namespace", "ns"), fromConfig, containerdTarget{"/a.sock", "ns"}, true},
		{"flag given with its default value still wins", parse("--containerd-address", "/run/containerd/containerd.sock"), fromConfig, containerdTarget{"/run/containerd/containerd.sock", "other"}, true},
	} {
		if got, explicit := resolveContainerd(tc.o, tc.cfg); got != tc.want || explicit != tc.explicit {
			t.Errorf("%s: got %+v explicit=%v, want %+v explicit=%v", tc.name, got, explicit, tc.want, tc.explicit)
		}
	}
}
