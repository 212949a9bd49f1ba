// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"fmt"
	"github.com/nri-sysctl/nri-sysctl/pkg/nsthread"
	"github.com/nri-sysctl/nri-sysctl/pkg/probe"
	"io/fs"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// fakeHost is a host's /proc/sys as paths below it and what they read.
var fakeHost = map[string]string{
	"net/ipv4/tcp_keepalive_time":         "1234\n",
	"net/ipv4/tcp_keepalive_intvl":        "75\n",
	"net/ipv4/tcp_keepalive_probes":       "9\n",
	"net/ipv4/ip_local_port_range":        "32768\t60999\n",
	"net/ipv4/ip_unprivileged_port_start": "1024\n",
	"net/ipv4/ping_group_range":           "1\t0\n",
	"net/ipv4/tcp_fastopen_key":           "00000000-00000000-00000000-00000000\n",
	"net/ipv4/conf/all/rp_filter":         "0\n",
	"net/ipv4/conf/default/rp_filter":     "2\n",
	"net/ipv4/conf/eth0.100/rp_filter":    "1\n",
	"net/ipv4/conf/eth0.100/forwarding":   "1\n",
	"net/core/somaxconn":                  "4096\n",
	"net/core/netdev_max_backlog":         "1000\n",
	"net/core/multiline":                  "a\nb\n",
	"kernel/sem":                          "32000\t1024000000\t500\t32000\n",
	"kernel/shmmax":                       "18446744073692774399\n",
	"kernel/msgmax":                       "8192\n",
	"kernel/domainname":                   "(none)\n",
	"kernel/hostname":                     "node-1\n",
	"kernel/core_pattern":                 "core\n",
	"kernel/pid_max":                      "4194304\n",
	"vm/swappiness":                       "60\n",
	"fs/file-max":                         "9223372036854775807\n",
	"fs/mqueue/msg_max":                   "10\n",
}

// useFakeHost points the host's /proc/sys at files until the test ends.
func useFakeHost(t testing.TB, files map[string]string) {
	t.Helper()
	fsys := fstest.MapFS{}
	for p, v := range files {
		fsys[p] = &fstest.MapFile{Data: []byte(v), Mode: 0o644}
	}
	saved, savedInHost := procSys, inHost
	procSys = fsys
	inHost = func(fn func(fs.FS) error) error { return fn(fsys) }
	t.Cleanup(func() { procSys, inHost = saved, savedInHost })
}

// values returns the config's base layer as key -> value, followed by
// "(host PATTERN)" for a value read from the host.
func values(cfg *Config) map[string]string {
	out := map[string]string{}
	for _, e := range cfg.Sysctls {
		out[e.Key] = e.Value
		if e.Source == SourceHost {
			out[e.Key] += " (host " + e.Pattern + ")"
		}
	}
	return out
}

func TestInheritGlobAndName(t *testing.T) {
	useFakeHost(t, fakeHost)
	fake := &fakeKernel{missing: map[string]error{}}
	cfg := mustParse(t, ""+
		"inheritFromHost:\n"+ // 1
		"  - net.ipv4.tcp_keepalive_*\n"+ // 2
		"  - net/core/somaxconn\n"+ // 3
		"  - net.ipv4.ip_local_port_range\n", // 4
		fake.check)
	want := map[string]string{
		"net.ipv4.tcp_keepalive_time":   "1234 (host net.ipv4.tcp_keepalive_*)",
		"net.ipv4.tcp_keepalive_intvl":  "75 (host net.ipv4.tcp_keepalive_*)",
		"net.ipv4.tcp_keepalive_probes": "9 (host net.ipv4.tcp_keepalive_*)",
		"net.core.somaxconn":            "4096 (host net.core.somaxconn)",
		// Tabs between fields become spaces.
		"net.ipv4.ip_local_port_range": "32768 60999 (host net.ipv4.ip_local_port_range)",
	}
	if got := values(cfg); !reflect.DeepEqual(got, want) {
		t.Errorf("base layer:\n%v\nwant\n%v", got, want)
	}
	for _, e := range cfg.Sysctls {
		if e.Key == "net.core.somaxconn" && e.Line != 3 {
			t.Errorf("%s: line %d, want 3 (its inheritFromHost entry)", e.Key, e.Line)
		}
	}
	if !cfg.InheritExpanded {
		t.Error("InheritExpanded is false after a parse with a checker")
	}
	wantEntries := []Inheritance{
		{Pattern: "net.ipv4.tcp_keepalive_*", Line: 2, Index: 0, Keys: []string{"net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_keepalive_time"}},
		{Pattern: "net.core.somaxconn", Line: 3, Index: 1, Keys: []string{"net.core.somaxconn"}},
		{Pattern: "net.ipv4.ip_local_port_range", Line: 4, Index: 2, Keys: []string{"net.ipv4.ip_local_port_range"}},
	}
	if !reflect.DeepEqual(cfg.InheritFromHost, wantEntries) {
		t.Errorf("InheritFromHost = %+v\nwant %+v", cfg.InheritFromHost, wantEntries)
	}
	// One probe for everything, and the candidates are in it.
	wantCalls := [][]string{{
		"net.core.somaxconn",
		"net.ipv4.ip_local_port_range",
		"net.ipv4.tcp_keepalive_intvl",
		"net.ipv4.tcp_keepalive_probes",
		"net.ipv4.tcp_keepalive_time",
	}}
	if !reflect.DeepEqual(fake.calls, wantCalls) {
		t.Errorf("checker called with %q, want %q", fake.calls, wantCalls)
	}
	checkConfig(t, cfg)
}

// A key in sysctls wins over the host's value; a rule's key is applied over
// the inherited base layer by the policy, so the inherited value stays.
func TestInheritExplicitWins(t *testing.T) {
	useFakeHost(t, fakeHost)
	cfg := mustParse(t, ""+
		"sysctls:\n"+
		"  net.ipv4.tcp_keepalive_time: 600\n"+
		"inheritFromHost: [net.ipv4.tcp_keepalive_*]\n"+
		"rules:\n"+
		"  - sysctls: {net.ipv4.tcp_keepalive_intvl: 30}\n",
		(&fakeKernel{}).check)
	want := map[string]string{
		"net.ipv4.tcp_keepalive_time":   "600",
		"net.ipv4.tcp_keepalive_intvl":  "75 (host net.ipv4.tcp_keepalive_*)",
		"net.ipv4.tcp_keepalive_probes": "9 (host net.ipv4.tcp_keepalive_*)",
	}
	if got := values(cfg); !reflect.DeepEqual(got, want) {
		t.Errorf("base layer:\n%v\nwant\n%v", got, want)
	}
	if got := len(cfg.Inherited()); got != 2 {
		t.Errorf("Inherited() has %d entries, want 2", got)
	}
	// The entry still matched all three.
	if got := cfg.InheritFromHost[0].Keys; len(got) != 3 {
		t.Errorf("entry keys %q, want all three keepalive keys", got)
	}
}

// kernel.* keeps only the namespaced keys the probe passes; the node-wide
// ones are never even probed.
func TestInheritDropsNodeWideAndMissing(t *testing.T) {
	useFakeHost(t, fakeHost)
	fake := &fakeKernel{missing: map[string]error{"kernel.shmmax": sysctl.ErrMissing}}
	cfg := mustParse(t, "inheritFromHost: [\"kernel.*\"]\n", fake.check)
	want := map[string]string{
		"kernel.sem":        "32000 1024000000 500 32000 (host kernel.*)",
		"kernel.msgmax":     "8192 (host kernel.*)",
		"kernel.domainname": "(none) (host kernel.*)",
	}
	if got := values(cfg); !reflect.DeepEqual(got, want) {
		t.Errorf("base layer:\n%v\nwant\n%v", got, want)
	}
	wantCalls := [][]string{{"kernel.domainname", "kernel.msgmax", "kernel.sem", "kernel.shmmax"}}
	if !reflect.DeepEqual(fake.calls, wantCalls) {
		t.Errorf("checker called with %q, want %q", fake.calls, wantCalls)
	}
	if got := cfg.InheritFromHost[0].LeftOut; got != 1 {
		t.Errorf("LeftOut = %d, want 1 (kernel.shmmax)", got)
	}
}

// net.core.netdev_max_backlog exists on the host but not in a fresh
// network namespace (6.x): a glob leaves it out, and naming it is an error.
func TestInheritKeyMissingInPodNamespace(t *testing.T) {
	useFakeHost(t, fakeHost)
	fake := &fakeKernel{missing: map[string]error{"net.core.netdev_max_backlog": sysctl.ErrMissing}}
	cfg := mustParse(t, "inheritFromHost: [net.core.*]\n", fake.check)
	if got, want := values(cfg), map[string]string{"net.core.somaxconn": "4096 (host net.core.*)"}; !reflect.DeepEqual(got, want) {
		t.Errorf("base layer %v, want %v (netdev_max_backlog is not in a pod's namespace, multiline cannot be written back)", got, want)
	}

	cfg, err := Parse("f.yaml", []byte("inheritFromHost:\n  - net.core.netdev_max_backlog\n"), fake.check)
	got := problems(t, cfg, err)
	want := []string{"f.yaml:2: inheritFromHost[0]: net.core.netdev_max_backlog matches no sysctl a pod can be given: net.core.netdev_max_backlog (does not exist in a fresh pod namespace on this kernel)"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Per-interface keys of the host's interfaces are left out ('*' matches
// across segments, including one with a dot in its file name); all and
// default stay.
func TestInheritPerInterface(t *testing.T) {
	useFakeHost(t, fakeHost)
	cfg := mustParse(t, "inheritFromHost: [\"net.ipv4.conf.*.rp_filter\"]\n", (&fakeKernel{}).check)
	want := map[string]string{
		"net.ipv4.conf.all.rp_filter":     "0 (host net.ipv4.conf.*.rp_filter)",
		"net.ipv4.conf.default.rp_filter": "2 (host net.ipv4.conf.*.rp_filter)",
	}
	if got := values(cfg); !reflect.DeepEqual(got, want) {
		t.Errorf("base layer:\n%v\nwant\n%v", got, want)
	}
	if got := cfg.InheritFromHost[0].LeftOut; got != 1 {
		t.Errorf("LeftOut = %d, want 1 (eth0/100)", got)
	}
}

// A glob leaves out the keys containerd gives every pod a value of its
// own for, and per-namespace secrets; naming one exactly inherits it.
func TestInheritGlobLeavesOut(t *testing.T) {
	useFakeHost(t, fakeHost)
	cfg := mustParse(t, "inheritFromHost: [\"net.ipv4.*\", net.ipv4.ping_group_range]\n", (&fakeKernel{}).check)
	got := values(cfg)
	for _, k := range []string{"net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_fastopen_key"} {
		if _, ok := got[k]; ok {
			t.Errorf("a glob inherited %s: %v", k, got)
		}
	}
	if v := got["net.ipv4.ping_group_range"]; v != "1 0 (host net.ipv4.ping_group_range)" {
		t.Errorf("named net.ipv4.ping_group_range = %q, want the host's 1 0 from its exact entry", v)
	}
	if v := got["net.ipv4.tcp_keepalive_time"]; v != "1234 (host net.ipv4.*)" {
		t.Errorf("net.ipv4.tcp_keepalive_time = %q, want 1234 from net.ipv4.*", v)
	}
}

func TestInheritProblems(t *testing.T) {
	useFakeHost(t, fakeHost)
	pass := (&fakeKernel{}).check
	tests := []struct {
		name, data string
		want       []string
	}{
		{"glob matches nothing", "inheritFromHost: [\"net.nosuch.*\"]\n",
			[]string{"f.yaml:1: inheritFromHost[0]: net.nosuch.* matches no sysctl on this host"}},
		{"name does not exist", "inheritFromHost:\n  - net.core.nosuch\n",
			[]string{"f.yaml:2: inheritFromHost[0]: net.core.nosuch does not exist on this host"}},
		{"glob matches only node-wide keys", "inheritFromHost:\n  - net.core.somaxconn\n  - \"vm.*\"\n",
			[]string{"f.yaml:3: inheritFromHost[1]: vm.* matches only sysctls that are not namespaced (vm.swappiness): pods share the host's values of those already"}},
		{"many node-wide keys are summed up", "inheritFromHost: [\"kernel.[chp]*\"]\n",
			[]string{"f.yaml:1: inheritFromHost[0]: kernel.[chp]* matches only sysctls that are not namespaced (kernel.core_pattern, kernel.hostname, kernel.pid_max): pods share the host's values of those already"}},
		{"name is node-wide", "inheritFromHost: [vm.swappiness]\n",
			[]string{"f.yaml:1: inheritFromHost[0]: vm.swappiness " + notNS}},
		{"kernel.hostname", "inheritFromHost: [kernel.hostname]\n",
			[]string{"f.yaml:1: inheritFromHost[0]: kernel.hostname is set by the runtime from the pod's hostname; set the pod's hostname instead"}},
		{"host interface only", "inheritFromHost: [\"net/ipv4/conf/eth0.100/*\"]\n",
			[]string{"f.yaml:1: inheritFromHost[0]: net.ipv4.conf.eth0/100.* matches no sysctl a pod can be given: net.ipv4.conf.eth0/100.forwarding (a setting of one of the host's network interfaces, which a pod does not have); net.ipv4.conf.eth0/100.rp_filter (a setting of one of the host's network interfaces, which a pod does not have)"}},
		{"value cannot be written back", "inheritFromHost: [net.core.multiline]\n",
			[]string{"f.yaml:1: inheritFromHost[0]: net.core.multiline matches no sysctl a pod can be given: net.core.multiline (the host's value cannot be written back: value contains a newline)"}},
		{"bad glob", "inheritFromHost: [\"net.[\"]\n",
			[]string{`f.yaml:1: inheritFromHost[0]: bad glob "net.[": syntax error in pattern`}},
		{"upper case glob", "inheritFromHost: [\"NET.*\"]\n",
			[]string{`f.yaml:1: inheritFromHost[0]: bad glob "NET.*": want the lower-case characters of a sysctl name and the glob characters * ? [ ]`}},
		{"bad name", "inheritFromHost: [net..core]\n",
			[]string{`f.yaml:1: inheritFromHost[0]: invalid sysctl name "net..core": ` + badName}},
		{"same entry twice", "inheritFromHost:\n  - net.core.somaxconn\n  - net/core/somaxconn\n",
			[]string{"f.yaml:3: inheritFromHost[1]: net/core/somaxconn is already listed at line 2"}},
		{"empty entry", "inheritFromHost: [\"\"]\n",
			[]string{"f.yaml:1: inheritFromHost[0]: empty entry"}},
		{"not a list", "inheritFromHost: net.*\n",
			[]string{`f.yaml:1: inheritFromHost: must be a list of sysctl names or globs, got "net.*"`}},
		// One bad entry rejects the whole config, and every problem is
		// listed in line order.
		{"rejected whole", "" +
			"inheritFromHost:\n" + // 1
			"  - net.ipv4.tcp_keepalive_*\n" + // 2
			"  - net.nosuch\n" + // 3
			"sysctls:\n" + // 4
			"  vm.swappiness: 1\n", // 5
			[]string{
				"f.yaml:3: inheritFromHost[1]: net.nosuch does not exist on this host",
				"f.yaml:5: sysctls.vm.swappiness: vm.swappiness " + notNS,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("f.yaml", []byte(tt.data), pass)
			got := problems(t, cfg, err)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// Without a checker (validate --skip-kernel-check) nothing is expanded:
// which host keys a pod can be given is the probe's to say. What needs no
// host is still checked.
func TestInheritWithoutChecker(t *testing.T) {
	useFakeHost(t, fakeHost)
	cfg := mustParse(t, "inheritFromHost: [\"net.nosuch.*\"]\nsysctls: {net.core.somaxconn: 1}\n", nil)
	if cfg.InheritExpanded || len(cfg.Inherited()) != 0 || len(cfg.Sysctls) != 1 {
		t.Errorf("expanded without a checker: %+v", cfg)
	}
	if len(cfg.InheritFromHost) != 1 || cfg.InheritFromHost[0].Pattern != "net.nosuch.*" {
		t.Errorf("InheritFromHost = %+v, want the one entry", cfg.InheritFromHost)
	}
	cfg, err := Parse("f.yaml", []byte("inheritFromHost: [vm.swappiness]\n"), nil)
	if got := problems(t, cfg, err); len(got) != 1 || !strings.Contains(got[0], "not namespaced") {
		t.Errorf("problems %q, want vm.swappiness refused", got)
	}
}

func TestInheritCheckerError(t *testing.T) {
	useFakeHost(t, fakeHost)
	fake := &fakeKernel{err: errors.New("kernel probe: cannot create throw-away namespaces")}
	cfg, err := Parse("f.yaml", []byte("inheritFromHost: [net.core.somaxconn]\n"), fake.check)
	want := []string{"f.yaml: kernel probe: cannot create throw-away namespaces"}
	if got := problems(t, cfg, err); !reflect.DeepEqual(got, want) {
		t.Errorf("problems %q, want %q", got, want)
	}
}

// The real /proc/sys: the walk turns paths into dot names, and reads a
// value the way the kernel prints it.
func TestHostSysctlNamesOnThisHost(t *testing.T) {
	names, err := hostSysctlNames(procSys)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"net.ipv4.tcp_keepalive_time", "kernel.sem", "net.ipv4.conf.all.rp_filter"} {
		if _, found := slices.BinarySearch(names, want); !found {
			t.Errorf("%s not among the %d names listed from /proc/sys", want, len(names))
		}
	}
	v, err := readHostValue(procSys, "net.ipv4.ip_local_port_range")
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(v); len(f) != 2 || strings.Contains(v, "\t") || strings.Join(f, " ") != v {
		t.Errorf("ip_local_port_range read as %q, want two fields separated by one space", v)
	}
}

// inheritInChildEnv makes the test binary, re-run under unshare, parse an
// inheritFromHost config with the real probe and print what it inherited.
const inheritInChildEnv = "NRI_SYSCTL_TEST_INHERIT_CHILD"

// TestInheritInChild is the child's side of the tests below.
func TestInheritInChild(t *testing.T) {
	if os.Getenv(inheritInChildEnv) != "1" {
		t.Skip("run by TestInheritReadsTheHostsNamespaces")
	}
	cfg, err := Parse("f.yaml", []byte("inheritFromHost: [net.ipv4.tcp_keepalive_time]\n"), probe.Kernel)
	if err != nil {
		fmt.Printf("error: %v\n", err)
		return
	}
	for _, e := range cfg.Inherited() {
		fmt.Printf("inherited %s=%s\n", e.Key, e.Value)
	}
}

// runInheritChild runs TestInheritInChild under unshare with the given
// flags, after the shell command setup.
func runInheritChild(t *testing.T, setup string, unshareArgs ...string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs util-linux unshare")
	}
	args := append(unshareArgs, "sh", "-c", setup+` && exec "$0" -test.run '^TestInheritInChild$' -test.v`, os.Args[0])
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(os.Environ(), inheritInChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("unshare %v: %v\n%s", unshareArgs, err, out)
	}
	return string(out)
}

// Under `unshare -n` with the key set to 1234 in its
// own network namespace, validate used to print 1234 as the host's value.
// The values are read in the host's namespaces (pid 1's).
func TestInheritReadsTheHostsNamespaces(t *testing.T) {
	host, err := os.ReadFile("/proc/sys/net/ipv4/tcp_keepalive_time")
	if err != nil {
		t.Fatal(err)
	}
	hostValue := strings.TrimSpace(string(host))
	if hostValue == "1234" {
		t.Skip("the host's value is the test's own")
	}
	out := runInheritChild(t, "echo 1234 > /proc/sys/net/ipv4/tcp_keepalive_time", "-n")
	if want := "inherited net.ipv4.tcp_keepalive_time=" + hostValue + "\n"; !strings.Contains(out, want) {
		t.Fatalf("child in its own network namespace:\n%s\nwant a line %q", out, want)
	}
}

// Where pid 1 is not the host's init (a pod without hostPID), the host's
// namespaces are out of reach: the config is refused with that reason,
// never expanded from the process's own namespaces.
func TestInheritRefusedWithoutTheHostsPIDNamespace(t *testing.T) {
	out := runInheritChild(t, "true", "-p", "-f", "--mount-proc", "-n")
	want := "error: invalid config (1 problem(s)):\n  f.yaml:1: inheritFromHost: inheritFromHost needs the host's namespaces: " + nsthread.ErrNotHostPIDNamespace.Error()
	if !strings.Contains(out, want) {
		t.Fatalf("child in its own pid namespace:\n%s\nwant %q", out, want)
	}
}
