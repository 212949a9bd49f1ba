package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemo is what `make demo` shows: the shipped config/config.yaml, one
// pod, and the values inside it beside the kernel's and the host's. It is
// also a test: the shipped defaults must reach the pod.
func TestDemo(t *testing.T) {
	c := getCluster(t)
	cfgText, err := os.ReadFile(filepath.Join(c.repoRoot, "config", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	startPlugin(t, string(cfgText))
	pod := runPod(t, PodSpec{Name: "demo", Namespace: "default"})
	id := runContainer(t, pod, "app")

	want := map[string]string{}
	for _, line := range strings.Split(string(cfgText), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(line, "  net.") || strings.HasPrefix(line, "  kernel.") {
			if k, v, ok := strings.Cut(trimmed, ":"); ok {
				want[k] = strings.Trim(strings.TrimSpace(v), `"`)
			}
		}
	}
	if len(want) == 0 {
		t.Fatal("found no defaults in config/config.yaml")
	}
	keys := sortedKeys(want)
	inside := readSysctls(t, id, keys...)

	var b strings.Builder
	fmt.Fprintf(&b, "\ncontainerd %s, plugin config config/config.yaml, pod default/demo\n\n", c.version)
	fmt.Fprintf(&b, "%-34s %-14s %-14s %-10s\n", "sysctl", "kernel default", "in the pod", "host")
	for _, k := range keys {
		fmt.Fprintf(&b, "%-34s %-14s %-14s %-10s\n", k, c.kernel[k], inside[k], hostSysctl(t, k))
	}
	fmt.Fprintf(&b, "\ncrictl inspect annotation %s=%q\n", annotationInjected, containerAnnotations(t, id)[annotationInjected])
	t.Log(b.String())
	wantSysctls(t, "demo pod", inside, want)
}
