// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package vm

// kubelet's own defaultPodSysctls (alpha in 1.37, feature gate
// DefaultPodSysctls) side by side with nri-sysctl, on the same kubelet and
// the same node image: the same defaults and the same static pods, booted
// three times:
//   compare-kubelet  kubelet's defaultPodSysctls, nri-sysctl.service off
//   compare-plugin   nri-sysctl with the same defaults, feature gate off
//   compare-both     both; the plugin's values differ from kubelet's by one,
//                    so each value read says who set it
// kubelet's defaults are not written by hand: the node exports them from the
// plugin's config at boot (`nri-sysctl export-kubelet`, rootfs setup.sh) into
// kubelet's --config-dir, the way docs/kubelet-comparison.md tells a user to
// move to kubelet's feature. So the comparison also checks that the exported
// fragment gives the pods what the plugin gives them.
// Values are read inside each pod's container. The test fails where the two
// disagree on a case where they are meant to agree (knownDifferences lists
// the ones that are explained in docs/kubelet-comparison.md), and where
// compare-both is not what docs/testing.md promises (the pod's own values,
// kubelet's defaults included, win over the plugin's).

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var compareKeys = []string{
	"net.ipv4.tcp_keepalive_time",
	"net.ipv4.tcp_keepalive_probes", // given as net/ipv4/tcp_keepalive_probes in both configs
	"net.ipv4.ip_unprivileged_port_start",
	"kernel.msgmax",
	"kernel.domainname",
}

// comparePods are test/vm/rootfs/usr/local/lib/vmtest/manifests/compare.
var comparePods = []string{"plain", "own", "slash", "hostnet", "hostipc", "userns"}

var compareRuns = []string{"compare-kubelet", "compare-plugin", "compare-both"}

// notComparable: pods where kubelet's feature and the plugin are not meant
// to agree, with the reason (docs/kubelet-comparison.md).
var notComparable = map[string]string{
	"userns": "the plugin leaves out keys a user namespace refuses (docs/configuration.md); kubelet sets every default",
}

const notStarted = "did not start"

func TestVMKubeletComparison(t *testing.T) {
	skipUnlessVM(t)
	img := getNodeImage(t, specContainerd)
	results := map[string]map[string]map[string]string{} // run -> pod -> key -> value
	host := map[string]string{}
	for _, run := range compareRuns {
		ok := t.Run(run, func(t *testing.T) {
			v := bootVM(t, img, run, "")
			if run != "compare-plugin" {
				v.logExportedFragment()
			}
			// A pod that never starts is a result too (a default its
			// namespaces refuse): its row says so, with kubelet's reason.
			if err := v.waitPods([]string{"plain"}, 10*time.Minute); err != nil {
				t.Fatal(err)
			}
			for _, pod := range comparePods {
				v.waitPodOrError(pod, 3*time.Minute)
			}
			results[run] = map[string]map[string]string{}
			for _, pod := range comparePods {
				if id, err := v.appContainer(pod); err != nil || id == "" {
					why := v.notStartedReason(pod)
					t.Logf("%s: pod %s did not start: %s", run, pod, why)
					results[run][pod] = map[string]string{}
					for _, k := range compareKeys {
						results[run][pod][k] = notStarted + ": " + why
					}
					continue
				}
				got, err := v.podValues(pod, compareKeys)
				if err != nil {
					t.Fatalf("pod %s: %v", pod, err)
				}
				results[run][pod] = got
				t.Logf("%s: pod %s: %s", run, pod, formatValues(got))
			}
			if run != "compare-kubelet" {
				// Not proof of anything (the values above are): what the
				// plugin warned of, to tell why a pod lacks its values,
				// such as a pod lookup that failed on a loaded host.
				warnings, _ := v.run("journalctl -u nri-sysctl --no-pager -o cat | grep -E 'level=(warning|error)' | tail -n 20", time.Minute)
				t.Logf("%s: the plugin's warnings:\n%s", run, warnings)
			}
			h, err := v.hostValues(compareKeys)
			if err != nil {
				t.Fatal(err)
			}
			host = h
		})
		if !ok {
			t.FailNow()
		}
	}

	table := comparisonTable(results, host)
	t.Logf("values read inside the pods' containers:\n%s", table)
	if out := os.Getenv("NRI_SYSCTL_VM_COMPARISON_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	} else if err := os.MkdirAll(filepath.Join(repoRoot(t), "bin"), 0o755); err == nil {
		_ = os.WriteFile(filepath.Join(repoRoot(t), "bin", "kubelet-comparison.md"), []byte(table), 0o644)
	}

	k, p, b := results["compare-kubelet"], results["compare-plugin"], results["compare-both"]
	for _, pod := range comparePods {
		for _, key := range compareKeys {
			id := pod + "/" + key
			if why, known := notComparable[pod]; known {
				t.Logf("%s: not compared (%s): kubelet %q, plugin %q", id, why, k[pod][key], p[pod][key])
			} else if k[pod][key] != p[pod][key] {
				t.Errorf("%s: kubelet's defaultPodSysctls gives %q, nri-sysctl %q", id, k[pod][key], p[pod][key])
			}
			// Both: kubelet's defaults reach containerd as the pod's own
			// sysctls, and the pod's own values win over the plugin's.
			if b[pod][key] != k[pod][key] {
				t.Errorf("%s with both: %q, want kubelet's %q (the plugin defers to the pod's sysctls, kubelet's defaults among them)", id, b[pod][key], k[pod][key])
			}
		}
	}
	// Where the two are meant to differ: kubelet sets kernel.domainname in
	// hostUsers: false pods, where runc cannot write it, so they fail;
	// the plugin leaves it out for them (its user-namespace probe) and the
	// pod starts with every other default.
	if v := p["userns"]["kernel.domainname"]; strings.HasPrefix(v, notStarted) {
		t.Errorf("the hostUsers: false pod does not start under nri-sysctl: %s", v)
	} else {
		want := map[string]string{}
		for key, val := range p["plain"] {
			want[key] = val
		}
		want["kernel.domainname"] = host["kernel.domainname"]
		if d := diffValues(p["userns"], want); len(d) > 0 {
			t.Errorf("userns pod under nri-sysctl: %s", strings.Join(d, "; "))
		}
	}
}

// exportedFragment is where the node's set-up puts export-kubelet's output.
const exportedFragment = "/etc/kubernetes/kubelet.conf.d/50-nri-sysctl.conf"

// logExportedFragment logs the drop-in kubelet got, and fails the test when
// the export did not make one.
func (v *vm) logExportedFragment() {
	v.t.Helper()
	out, err := v.run("cat "+exportedFragment, time.Minute)
	if err != nil || !strings.Contains(out, "\ndefaultPodSysctls:\n") {
		setup, _ := v.run("journalctl -u vmtest-setup --no-pager -o cat | tail -n 30", time.Minute)
		v.t.Fatalf("no exported kubelet drop-in with defaultPodSysctls at %s (%v):\n%s\nvmtest-setup:\n%s", exportedFragment, err, out, setup)
	}
	v.t.Logf("kubelet's drop-in, exported on the node by nri-sysctl export-kubelet:\n%s", out)
}

// waitPodOrError waits until the pod runs, or kubelet has logged the same
// error for it twice, 10s apart, or timeout.
func (v *vm) waitPodOrError(pod string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		if id, err := v.appContainer(pod); err == nil && id != "" {
			return
		}
		why := v.notStartedReason(pod)
		if why != noError && why == last {
			return
		}
		last = why
		time.Sleep(10 * time.Second)
	}
}

const noError = "no error logged by kubelet"

// notStartedReason is the last RunPodSandbox/StartContainer error kubelet
// logged for a static pod, shortened to the runtime's own words.
func (v *vm) notStartedReason(pod string) string {
	out, _ := v.run(fmt.Sprintf(`journalctl -u kubelet --no-pager -o cat | grep -F '%s-%s' | grep -oE '(runc create failed|nri-sysctl)[^"\\]*' | tail -n1`, pod, nodeName), time.Minute)
	if out = strings.TrimSpace(out); out == "" {
		return noError
	}
	return out
}

func comparisonTable(results map[string]map[string]map[string]string, host map[string]string) string {
	var b strings.Builder
	var notes []string
	cell := func(v string) string {
		if !strings.HasPrefix(v, notStarted) {
			return v
		}
		i := slices.Index(notes, v)
		if i < 0 {
			notes = append(notes, v)
			i = len(notes) - 1
		}
		return fmt.Sprintf("pod did not start [%d]", i+1)
	}
	fmt.Fprintf(&b, "| pod | key | kernel (VM host) | kubelet defaultPodSysctls | nri-sysctl | both (plugin's values differ) |\n|---|---|---|---|---|---|\n")
	for _, pod := range comparePods {
		for _, key := range compareKeys {
			k := results["compare-kubelet"][pod][key]
			p := results["compare-plugin"][pod][key]
			mark := ""
			if k != p {
				mark = " **≠**"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s%s | %s |\n", pod, key, host[key], cell(k), cell(p), mark, cell(results["compare-both"][pod][key]))
		}
	}
	for i, n := range notes {
		fmt.Fprintf(&b, "\n[%d] %s\n", i+1, n)
	}
	return b.String()
}
