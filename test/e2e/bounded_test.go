// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

// Bounded work per request: a pod author who writes the largest
// profiles annotation Kubernetes allows (256 KiB) must not push the plugin
// past containerd's plugin_request_timeout. Before the bound, the plugin
// spent seconds on such a pod; containerd then closed it, created the
// attacker's container bare, and, fail-closed, refused every later pod
// until the plugin came back.

import (
	"fmt"
	"strings"
	"testing"
)

// attackProfiles is the attacker's annotation: 256 KiB of distinct short
// names ("p0,p1,..."), the case whose old cost grew with the square of
// their number.
var attackProfiles = distinctProfiles(256 << 10)

// distinctProfiles is a profiles annotation of exactly size bytes, every
// name in it different.
func distinctProfiles(size int) string {
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "p%d,", i)
	}
	return b.String()[:size]
}

// TestProfilesAnnotationAttack runs the attack on a fail-closed node
// (the shipped required_plugins drop-in, onLookupError: fail): the
// attacker's container is refused or has the defaults, the next pod has
// them, the plugin keeps its connection, and containerd closed no plugin.
func TestProfilesAnnotationAttack(t *testing.T) {
	c := getCluster(t)
	skipWithoutDefaultValidator(t, c)
	checkMeaningful(t, nodeDefaults)
	c.imports = []string{failClosedDropIn(c)}
	restartContainerdFor(t, "", func() { c.imports = nil })
	p := startPlugin(t, defaultsYAML(nodeDefaults)+"onLookupError: fail\n")
	checkAttack(t, c, "e2e-attack", p.running)
}

// checkAttack starts the attacker's pod and then a plain one, and checks
// what each container reads and what containerd logged meanwhile.
// stillServing tells whether the plugin that served before is still the
// one running.
func checkAttack(t *testing.T, c *cluster, namespace string, stillServing func() bool) {
	t.Helper()
	keys := sortedKeys(nodeDefaults)
	logFrom := fileSize(c.logPath)
	attacker := runPod(t, PodSpec{Name: "attacker", Namespace: namespace, Annotations: map[string]string{annotationProfiles: attackProfiles}})
	if id, err := c.createContainerErr(attacker, "app", []string{"sleep", "3600"}); err != nil {
		t.Logf("the attacker's container was refused: %s", criErrorLine(err))
	} else {
		if _, err := c.crictlRaw("start", id); err != nil {
			t.Fatal(err)
		}
		if !wantSysctls(t, "the attacker's container", readSysctls(t, id, keys...), nodeDefaults) {
			t.Log(c.whyLacking(t, id))
		}
		if skipped := containerAnnotations(t, id)[annotationSkipped]; !strings.Contains(skipped, "262144 bytes long") || len(skipped) > 4096 {
			t.Errorf("the attacker's skipped annotation (%d bytes) does not say the annotation was over its bound: %.200q", len(skipped), skipped)
		}
	}
	plain := runPod(t, PodSpec{Name: "plain", Namespace: namespace})
	id := runContainer(t, plain, "app")
	if !wantSysctls(t, "the next pod's container", readSysctls(t, id, keys...), nodeDefaults) {
		t.Log(c.whyLacking(t, id))
	}
	if !stillServing() {
		t.Error("the plugin is no longer running")
	}
	if closed := lineWith(tailFrom(c.logPath, logFrom, 100000), "closing plugin"); closed != "" {
		t.Errorf("containerd closed a plugin during the attack: %s", closed)
	}
}
