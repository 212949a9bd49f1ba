// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package crioimport

import (
	"reflect"
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
)

// fullCrioConf is a crio.conf as shipped, trimmed, with default_sysctls set
// among the other [crio.runtime] keys.
const fullCrioConf = `# The CRI-O configuration file specifies all of the available configuration
# options and command-line flags for the crio(8) OCI Kubernetes Container
# Runtime daemon, but in a TOML format that can be more easily modified and
# versioned.

[crio]
root = "/var/lib/containers/storage"
runroot = "/run/containers/storage"
storage_driver = "overlay"
log_dir = "/var/log/crio/pods"
version_file = "/var/run/crio/version"

[crio.api]
listen = "/var/run/crio/crio.sock"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
no_pivot = false
conmon_cgroup = "system.slice"
default_capabilities = [
	"CHOWN",
	"DAC_OVERRIDE",
	"FSETID",
]
default_sysctls = [
	"net.ipv4.ping_group_range=0 2147483647",
	# keepalive: cloud NAT drops idle flows after 350 s
	"net.ipv4.tcp_keepalive_time=300",
	'net/ipv4/conf/eth0.100/rp_filter=2',
	"net.ipv4.tcp_rmem=4096\t87380\t6291456",
	"kernel.core_pattern=|/usr/lib/systemd/systemd-coredump %P",
	"net.ipv4.tcp_syncookies",
]
selinux = false
pids_limit = 0
log_size_max = -1

[crio.runtime.runtimes.runc]
runtime_path = ""
runtime_type = "oci"
runtime_root = "/run/runc"

[crio.image]
default_transport = "docker://"
pause_image = "registry.k8s.io/pause:3.9"

[crio.network]
network_dir = "/etc/cni/net.d/"
plugin_dirs = [
	"/opt/cni/bin/",
]
`

const notNS = "is not namespaced: setting it from a pod would change the whole node; set it on the host with /etc/sysctl.d instead"

func TestConvert(t *testing.T) {
	tests := []struct {
		name, data string
		// want is the whole output.
		want string
		// problems are the left-out entries' messages.
		problems []string
		// sysctls is what config.Parse makes of the output.
		sysctls map[string]string
	}{
		{
			name: "full crio.conf",
			data: fullCrioConf,
			want: header("/etc/crio/crio.conf") +
				"sysctls:\n" +
				"  net.ipv4.ping_group_range: \"0 2147483647\"\n" +
				"  net.ipv4.tcp_keepalive_time: \"300\"\n" +
				"  net.ipv4.conf.eth0/100.rp_filter: \"2\"\n" +
				"  net.ipv4.tcp_rmem: \"4096\\t87380\\t6291456\"\n" +
				"  # left out: /etc/crio/crio.conf:33: default_sysctls[4] \"kernel.core_pattern=|/usr/lib/systemd/systemd-coredump %P\": kernel.core_pattern " + notNS + "\n" +
				"  # left out: /etc/crio/crio.conf:34: default_sysctls[5] \"net.ipv4.tcp_syncookies\": not in key=value form\n",
			problems: []string{
				"/etc/crio/crio.conf:33: default_sysctls[4] \"kernel.core_pattern=|/usr/lib/systemd/systemd-coredump %P\": kernel.core_pattern " + notNS,
				"/etc/crio/crio.conf:34: default_sysctls[5] \"net.ipv4.tcp_syncookies\": not in key=value form",
			},
			sysctls: map[string]string{
				"net.ipv4.ping_group_range":        "0 2147483647",
				"net.ipv4.tcp_keepalive_time":      "300",
				"net.ipv4.conf.eth0/100.rp_filter": "2",
				"net.ipv4.tcp_rmem":                "4096\t87380\t6291456",
			},
		},
		{
			name: "drop-in with only default_sysctls",
			data: "[crio.runtime]\ndefault_sysctls = [\"net.core.somaxconn=1024\", \"kernel.shm_rmid_forced=1\", \"\"]\n",
			want: header("/etc/crio/crio.conf") +
				"sysctls:\n" +
				"  net.core.somaxconn: \"1024\"\n" +
				"  kernel.shm_rmid_forced: \"1\"\n",
			sysctls: map[string]string{"net.core.somaxconn": "1024", "kernel.shm_rmid_forced": "1"},
		},
		{
			name: "dotted key under [crio]",
			data: "[crio]\nruntime.default_sysctls = [\n  \"vm.swappiness=10\",\n]\n",
			want: header("/etc/crio/crio.conf") +
				"sysctls: {}\n" +
				"# left out: /etc/crio/crio.conf:3: default_sysctls[0] \"vm.swappiness=10\": vm.swappiness " + notNS + "\n",
			problems: []string{"/etc/crio/crio.conf:3: default_sysctls[0] \"vm.swappiness=10\": vm.swappiness " + notNS},
			sysctls:  map[string]string{},
		},
		{
			name: "spaces, bad names and values, a repeated key",
			data: "" +
				"[crio.runtime]\n" + // 1
				"default_sysctls = [\n" + // 2
				"  \"net.core.somaxconn = 1024\",\n" + // 3
				"  \"net.ipv4.tcp_keepalive_time=600\",\n" + // 4
				"  \"net/ipv4/tcp_keepalive_time=700\",\n" + // 5
				"  \"Net.Core.X=1\",\n" + // 6
				"  \"kernel.hostname=node\",\n" + // 7
				"  \"net.core.somaxconn=\",\n" + // 8
				"  \"net.core.somaxconn=1\\nnet.core.x=2\",\n" + // 9
				"]\n",
			want: header("/etc/crio/crio.conf") +
				"sysctls:\n" +
				"  # left out: /etc/crio/crio.conf:3: default_sysctls[0] \"net.core.somaxconn = 1024\": spaces around the key or the value (CRI-O refuses them too; write key=value)\n" +
				"  # left out: /etc/crio/crio.conf:4: default_sysctls[1] \"net.ipv4.tcp_keepalive_time=600\": default_sysctls[2] sets net.ipv4.tcp_keepalive_time again, and the later value wins in CRI-O too\n" +
				"  net.ipv4.tcp_keepalive_time: \"700\"\n" +
				"  # left out: /etc/crio/crio.conf:6: default_sysctls[3] \"Net.Core.X=1\": invalid sysctl name \"Net.Core.X\": want lower-case segments of [a-z0-9_-] separated by '.' (or '/'), with no empty segment\n" +
				"  # left out: /etc/crio/crio.conf:7: default_sysctls[4] \"kernel.hostname=node\": kernel.hostname is set by the runtime from the pod's hostname; set the pod's hostname instead\n" +
				"  # left out: /etc/crio/crio.conf:8: default_sysctls[5] \"net.core.somaxconn=\": empty value\n" +
				"  # left out: /etc/crio/crio.conf:9: default_sysctls[6] \"net.core.somaxconn=1\\nnet.core.x=2\": value contains a newline\n",
			problems: []string{
				"/etc/crio/crio.conf:3: default_sysctls[0] \"net.core.somaxconn = 1024\": spaces around the key or the value (CRI-O refuses them too; write key=value)",
				"/etc/crio/crio.conf:4: default_sysctls[1] \"net.ipv4.tcp_keepalive_time=600\": default_sysctls[2] sets net.ipv4.tcp_keepalive_time again, and the later value wins in CRI-O too",
				"/etc/crio/crio.conf:6: default_sysctls[3] \"Net.Core.X=1\": invalid sysctl name \"Net.Core.X\": want lower-case segments of [a-z0-9_-] separated by '.' (or '/'), with no empty segment",
				"/etc/crio/crio.conf:7: default_sysctls[4] \"kernel.hostname=node\": kernel.hostname is set by the runtime from the pod's hostname; set the pod's hostname instead",
				"/etc/crio/crio.conf:8: default_sysctls[5] \"net.core.somaxconn=\": empty value",
				"/etc/crio/crio.conf:9: default_sysctls[6] \"net.core.somaxconn=1\\nnet.core.x=2\": value contains a newline",
			},
			sysctls: map[string]string{"net.ipv4.tcp_keepalive_time": "700"},
		},
		{
			name: "an empty list",
			data: "[crio.runtime]\ndefault_sysctls = []\n",
			want: header("/etc/crio/crio.conf") +
				"sysctls: {}\n",
			sysctls: map[string]string{},
		},
		{
			// Without positions the entries are still converted.
			name: "inline table: no line numbers",
			data: "crio = {runtime = {default_sysctls = [\"net.core.somaxconn=1024\", \"a\"]}}\n",
			want: header("/etc/crio/crio.conf") +
				"sysctls:\n" +
				"  net.core.somaxconn: \"1024\"\n" +
				"  # left out: /etc/crio/crio.conf: default_sysctls[1] \"a\": not in key=value form\n",
			problems: []string{"/etc/crio/crio.conf: default_sysctls[1] \"a\": not in key=value form"},
			sysctls:  map[string]string{"net.core.somaxconn": "1024"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Convert("/etc/crio/crio.conf", []byte(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			if res.YAML != tt.want {
				t.Errorf("YAML:\n%s\nwant:\n%s", res.YAML, tt.want)
			}
			var problems []string
			for _, p := range res.Problems {
				problems = append(problems, p.Error())
			}
			if !reflect.DeepEqual(problems, tt.problems) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(tt.problems, "\n"))
			}
			// Round trip: the output is a config nri-sysctl accepts,
			// with the values CRI-O would have set.
			cfg, err := config.Parse("out.yaml", []byte(res.YAML), nil)
			if err != nil {
				t.Fatalf("output rejected by config.Parse: %v\n%s", err, res.YAML)
			}
			got := map[string]string{}
			for _, e := range cfg.Sysctls {
				got[e.Key] = e.Value
			}
			if !reflect.DeepEqual(got, tt.sysctls) {
				t.Errorf("parsed back: %v, want %v", got, tt.sysctls)
			}
		})
	}
}

func header(source string) string {
	return "# nri-sysctl config imported from CRI-O's [crio.runtime] default_sysctls\n" +
		"# in " + source + " by `nri-sysctl import-crio`.\n" +
		"# Check it on the node: nri-sysctl validate --config FILE\n"
}

func TestConvertNothingToImport(t *testing.T) {
	tests := []struct{ name, data, want string }{
		{"not TOML", "[crio.runtime\ndefault_sysctls = []\n",
			"f.conf:1: not a CRI-O config: "},
		{"no default_sysctls", "[crio.runtime]\ndefault_runtime = \"runc\"\n",
			"f.conf: no default_sysctls in [crio.runtime]: nothing to import"},
		{"YAML instead", "sysctls:\n  net.core.somaxconn: 1\n",
			"f.conf:1: not a CRI-O config: "},
		{"not a list of strings", "[crio.runtime]\ndefault_sysctls = [1, 2]\n",
			`f.conf:2: not a CRI-O config: default_sysctls must be a list of "key=value" strings`},
		{"a string", "[crio.runtime]\ndefault_sysctls = \"net.core.somaxconn=1\"\n",
			`f.conf:2: not a CRI-O config: default_sysctls must be a list of "key=value" strings`},
		{"a table defined twice", "[crio.runtime]\ndefault_sysctls = []\n[crio.runtime]\n",
			"f.conf:3: not a CRI-O config: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Convert("f.conf", []byte(tt.data))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("Convert: %v, %+v; want an error starting %q", err, res, tt.want)
			}
		})
	}
}
