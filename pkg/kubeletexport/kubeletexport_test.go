// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package kubeletexport

import (
	"errors"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"gopkg.in/yaml.v3"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

var errDenied = errors.New("permission denied")

// exportCases: each kind of config, and what the node's probes found. The
// expected fragment of each is testdata/<name>.golden, comments included.
var exportCases = []struct {
	name   string
	config string
	// node changes the parsed config as loading it on a node would
	// (inheritFromHost expanded, values in the kernel's form).
	node func(*config.Config)
	// probed and refused are the user namespace probe's finding.
	probed  bool
	refused map[string]error
	// want are the defaultPodSysctls the fragment must give kubelet.
	want map[string]string
}{
	{
		name:   "defaults",
		config: "sysctls:\n  net.ipv4.tcp_keepalive_time: 600\n  net/ipv4/tcp_keepalive_probes: 5\n  kernel.msgmax: 16384\n  net.ipv4.ip_local_port_range: \"1024 65000\"\n",
		probed: true,
		want: map[string]string{"net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_keepalive_probes": "5",
			"kernel.msgmax": "16384", "net.ipv4.ip_local_port_range": "1024 65000"},
	},
	{
		name:   "empty",
		config: "# nothing yet\n",
		probed: true,
		want:   map[string]string{},
	},
	{
		name:    "user-namespace",
		config:  "sysctls:\n  kernel.domainname: nri-sysctl.test\n  net.ipv4.ping_group_range: \"0 2147483647\"\n  net.ipv4.tcp_keepalive_time: 600\n",
		probed:  true,
		refused: map[string]error{"kernel.domainname": errDenied},
		want:    map[string]string{"kernel.domainname": "nri-sysctl.test", "net.ipv4.ping_group_range": "0 2147483647", "net.ipv4.tcp_keepalive_time": "600"},
	},
	{
		name:    "user-namespace-fail",
		config:  "userNamespaceRefused: fail\nsysctls:\n  kernel.domainname: nri-sysctl.test\n",
		probed:  true,
		refused: map[string]error{"kernel.domainname": errDenied},
		want:    map[string]string{"kernel.domainname": "nri-sysctl.test"},
	},
	{
		name:   "not-probed",
		config: "sysctls:\n  kernel.domainname: nri-sysctl.test\n",
		want:   map[string]string{"kernel.domainname": "nri-sysctl.test"},
	},
	{
		name:   "inherited",
		config: "sysctls:\n  net.ipv4.tcp_keepalive_time: 600\ninheritFromHost:\n  - net.ipv4.tcp_fin_timeout\n  - net.ipv4.tcp_rmem\n",
		node: func(c *config.Config) {
			c.InheritExpanded = true
			c.Sysctls = append(c.Sysctls,
				config.Entry{Key: "net.ipv4.tcp_fin_timeout", Value: "30", Line: 4, Source: config.SourceHost, Pattern: "net.ipv4.tcp_fin_timeout"},
				config.Entry{Key: "net.ipv4.tcp_rmem", Value: "4096 131072 6291456", Line: 5, Source: config.SourceHost, Pattern: "net.ipv4.tcp_rmem"})
		},
		probed: true,
		want:   map[string]string{"net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_fin_timeout": "30", "net.ipv4.tcp_rmem": "4096 131072 6291456"},
	},
	{
		name:   "kernel-form",
		config: "sysctls:\n  net.ipv4.neigh.default.retrans_time_ms: 1001\n",
		node: func(c *config.Config) {
			c.Sysctls[0].Written, c.Sysctls[0].Value = "1001", "1004"
		},
		probed: true,
		want:   map[string]string{"net.ipv4.neigh.default.retrans_time_ms": "1004"},
	},
	{
		name:   "kubelet-refuses",
		config: "sysctls:\n  kernel.shm_next_id: 5\n  kernel.shmmax: 68719476736\n  net.core.somaxconn: 4096\n",
		probed: true,
		want:   map[string]string{"kernel.shmmax": "68719476736", "net.core.somaxconn": "4096"},
	},
	{
		name:   "interface",
		config: "sysctls:\n  net/ipv4/conf/eth0.100/rp_filter: 2\n  net.ipv4.conf.default.rp_filter: 1\n",
		probed: true,
		want:   map[string]string{"net.ipv4.conf.eth0/100.rp_filter": "2", "net.ipv4.conf.default.rp_filter": "1"},
	},
	{
		name:   "quoting",
		config: "sysctls:\n  net.ipv4.tcp_rmem: \"4096\\t87380 \\\"6291456\\\"\"\n  kernel.domainname: \"a\\\\b\"\n",
		probed: true,
		want:   map[string]string{"net.ipv4.tcp_rmem": "4096\t87380 \"6291456\"", "kernel.domainname": `a\b`},
	},
	{
		name: "rules-exclude-profiles",
		config: `sysctls:
  net.ipv4.tcp_keepalive_time: 600
rules:
  - name: batch
    match:
      namespaces: ["batch-*", "jobs"]
      labels: {tier: batch}
    sysctls:
      net.ipv4.tcp_keepalive_time: 300
  - match:
      runtimeHandlers: [kata]
      annotations: {"example.com/net": "fast"}
    sysctls:
      net.core.somaxconn: 4096
exclude:
  namespaces: [kube-system]
  labels: {"nri-sysctl.io/skip": "true"}
profiles:
  low-latency:
    allowedNamespaces: ["trading-*"]
    allowedRuntimeHandlers: [runc]
    sysctls: {net.ipv4.tcp_slow_start_after_idle: 0, net.core.somaxconn: 8192, net.ipv4.tcp_keepalive_time: 60}
  keepalive:
    sysctls: {net.ipv4.tcp_keepalive_intvl: 15}
`,
		probed: true,
		want:   map[string]string{"net.ipv4.tcp_keepalive_time": "600"},
	},
	{
		// Text from the config's author cannot end a comment line and
		// put YAML of its own into kubelet's config.
		name: "hostile-names",
		config: `sysctls:
  net.core.somaxconn: 1024
rules:
  - name: "x\ndefaultPodSysctls: {net.core.somaxconn: '1'}"
    match: {namespaces: ["a"]}
    sysctls: {net.core.somaxconn: 2048}
`,
		probed: true,
		want:   map[string]string{"net.core.somaxconn": "1024"},
	},
}

func TestFragment(t *testing.T) {
	for _, tc := range exportCases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse("/etc/nri-sysctl/config.yaml", []byte(tc.config), nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.node != nil {
				tc.node(cfg)
			}
			got, err := Fragment(Input{Config: cfg, UserNamespaceProbed: tc.probed, UserNamespaceRefused: tc.refused})
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to write it)", err)
			}
			if got != string(want) {
				t.Errorf("fragment differs from %s:\n--- got\n%s\n--- want\n%s", golden, got, want)
			}
			checkKubeletConfig(t, got, tc.want)
		})
	}
}

// checkKubeletConfig reads the fragment as YAML, as kubelet does, and
// checks everything it sets: the group, the kind, the gate and the defaults.
func checkKubeletConfig(t *testing.T, text string, want map[string]string) {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatalf("not YAML: %v", err)
	}
	if len(doc) != 4 || doc["apiVersion"] != "kubelet.config.k8s.io/v1beta1" || doc["kind"] != "KubeletConfiguration" {
		t.Errorf("want exactly apiVersion, kind, featureGates and defaultPodSysctls, got %v", doc)
	}
	if gates, _ := doc["featureGates"].(map[string]any); len(gates) != 1 || gates["DefaultPodSysctls"] != true {
		t.Errorf("featureGates = %v, want {DefaultPodSysctls: true}", doc["featureGates"])
	}
	raw, ok := doc["defaultPodSysctls"].(map[string]any)
	if !ok {
		t.Fatalf("defaultPodSysctls = %#v, want a mapping", doc["defaultPodSysctls"])
	}
	got := map[string]string{}
	for k, v := range raw {
		s, ok := v.(string)
		if !ok {
			t.Errorf("defaultPodSysctls.%s = %#v, want a string (kubelet's type is map[string]string)", k, v)
		}
		got[k] = s
	}
	if !maps.Equal(got, want) {
		t.Errorf("defaultPodSysctls = %q, want %q", got, want)
	}
}

// A config whose inheritFromHost was not read from the host (no kernel
// probe) cannot be exported: its pods would lack the inherited values.
func TestFragmentRefusesUnexpandedInheritance(t *testing.T) {
	cfg, err := config.Parse("/etc/nri-sysctl/config.yaml", []byte("inheritFromHost: [net.ipv4.tcp_fin_timeout]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Fragment(Input{Config: cfg})
	want := "/etc/nri-sysctl/config.yaml: inheritFromHost needs the kernel probe to read the host's values; run export-kubelet without --skip-kernel-check, on the node whose values you want"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %q", err, want)
	}
}

// kubelet's list of names it takes, against the plugin's: every name
// kubelet takes the plugin takes too, and the ones only the plugin takes
// are left out of the fragment.
func TestKubeletRefuses(t *testing.T) {
	for key, refused := range map[string]bool{
		"net.ipv4.tcp_keepalive_time":      false,
		"net.ipv4.conf.eth0/100.rp_filter": false,
		"fs.mqueue.msg_max":                false,
		"user.max_user_namespaces":         false,
		"kernel.domainname":                false,
		"kernel.sem":                       false,
		"kernel.shm_rmid_forced":           false,
		"kernel.msgmni":                    false,
		"kernel.shm_next_id":               true,
		"kernel.msg_next_id":               true,
		"net." + strings.Repeat("a", 250):  true,
	} {
		if got := kubeletRefuses(config.Entry{Key: key, Value: "1"}) != ""; got != refused {
			t.Errorf("kubeletRefuses(%s) = %v, want %v", key, got, refused)
		}
	}
	if kubeletRefuses(config.Entry{Key: "kernel.domainname", Value: "a\xffb"}) == "" {
		t.Error("a value that is not UTF-8 must be left out: JSON cannot carry it")
	}
}
