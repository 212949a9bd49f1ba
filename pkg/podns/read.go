package podns

import (
	"os"
	"strings"

	"github.com/nri-sysctl/nri-sysctl/pkg/nsthread"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// Value is a key's value in a pod's namespaces, or why it could not be read.
type Value struct {
	Value string
	Err   error
}

// Read reads each key inside the target namespaces from a throw-away OS
// thread (nsthread), entered as Write enters them: read-only, and no other
// goroutine ever runs there.
func Read(t Target, keys []string) map[string]Value {
	out := make(map[string]Value, len(keys))
	nsthread.Run(func() {
		in := newEntered(t, "read")
		for _, k := range keys {
			if err := in.into(k); err != nil {
				out[k] = Value{Err: err}
				continue
			}
			data, err := os.ReadFile(sysctl.Path(k))
			out[k] = Value{Value: strings.TrimSpace(string(data)), Err: err}
		}
	})
	return out
}

// PidTarget reaches through process pid, a process in the pod's
// namespaces, each namespace the host can enter that owns says is the
// pod's own.
func PidTarget(pid int, owns func(sysctl.Namespace) bool) Target {
	t := Target{}
	for _, ns := range enterable {
		if owns(ns) {
			t[ns] = NamespaceRef{Pid: pid}
		}
	}
	return t
}
