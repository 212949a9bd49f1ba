package probe

import (
	"os"
	"reflect"
	"testing"
)

func TestUserNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	refused, err := UserNamespace([]string{
		"net.core.xfrm_acq_expires", "net.ipv6.route.gc_thresh", "net.core.somaxconn",
		"net.ipv4.tcp_keepalive_time", "net.ipv4.ping_group_range",
		"net.ipv4.conf.eth0.rp_filter", "kernel.msgmax",
	})
	if err != nil {
		t.Fatal(err)
	}
	// Checked by hand on 6.x: `unshare -n` has these two writable,
	// `unshare -U -r -n` does not have them at all.
	want := map[string]bool{"net.core.xfrm_acq_expires": true, "net.ipv6.route.gc_thresh": true}
	if !reflect.DeepEqual(refused, want) {
		t.Fatalf("refused = %v, want %v", refused, want)
	}
}
