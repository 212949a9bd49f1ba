package plugin

import (
	"context"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

// Review finding 13: a key another plugin set in slash form is recognised.
func TestExistingSlashFormKeyIsKept(t *testing.T) {
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	ctr := &api.Container{Name: "app", Linux: &api.LinuxContainer{Sysctl: map[string]string{"net/ipv4/tcp_keepalive_time": "900"}}}
	adj, _, err := p.CreateContainer(context.Background(), testPod("sl", "network", "ipc"), ctr)
	if err != nil {
		t.Fatal(err)
	}
	if _, set := adj.GetLinux().GetSysctl()["net.ipv4.tcp_keepalive_time"]; set {
		t.Errorf("set tcp_keepalive_time although another plugin set it as net/ipv4/tcp_keepalive_time: %v", adj.GetLinux().GetSysctl())
	}
}
