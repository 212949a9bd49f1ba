// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package sysctl

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

func TestNormalize(t *testing.T) {
	tests := []struct{ in, want string }{
		{"net/ipv4/conf/eth0.100/rp_filter", "net.ipv4.conf.eth0/100.rp_filter"},
		{"net.ipv4.conf.eth0/100.rp_filter", "net.ipv4.conf.eth0/100.rp_filter"},
		{"net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_keepalive_time"},
		{"kernel/shm_rmid_forced", "kernel.shm_rmid_forced"},
		{"kernel.shm_rmid_forced", "kernel.shm_rmid_forced"},
		{"somaxconn", "somaxconn"},
		{"", ""},
		// Only the first separator decides.
		{"net.ipv4/conf", "net.ipv4/conf"},
		{"/net/ipv4", ".net.ipv4"},
		{"net/../../kernel/core_pattern", "net.//.//.kernel.core_pattern"},
		{"a/b.c/d", "a.b/c.d"},
	}
	for _, tt := range tests {
		if got := Normalize(tt.in); got != tt.want {
			t.Errorf("Normalize(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestNamespaceOf(t *testing.T) {
	tests := []struct {
		name string
		want Namespace
	}{
		{"net.ipv4.tcp_keepalive_time", Net},
		{"net.core.somaxconn", Net},
		{"net.ipv4.conf.eth0/100.rp_filter", Net},
		{"kernel.sem", IPC},
		{"kernel.shmmax", IPC},
		{"kernel.shmall", IPC},
		{"kernel.shm_rmid_forced", IPC},
		{"kernel.msgmax", IPC},
		{"kernel.msgmnb", IPC},
		{"fs.mqueue.msg_max", IPC},
		{"kernel.domainname", UTS},
		{"user.max_user_namespaces", User},
		{"kernel.core_pattern", NotNamespaced},
		{"vm.swappiness", NotNamespaced},
		{"fs.file-max", NotNamespaced},
		{"kernel.pid_max", NotNamespaced},
		// kernel.hostname is UTS in the kernel, but the runtime owns it;
		// ValidateNamespaced refuses it with its own message.
		{"kernel.hostname", NotNamespaced},
		{"network.x", NotNamespaced},
		{"net", NotNamespaced},
		{"netfoo.x", NotNamespaced},
		{"userx.y", NotNamespaced},
		// kernel.sem is an exact name, as in Kubernetes and runc.
		{"kernel.semx", NotNamespaced},
		{"kernel.sem_next_id", NotNamespaced},
		{"kernel.sem.x", NotNamespaced},
		// kernel.shm* and kernel.msg* are prefixes; bogus names that match
		// them are left to the kernel probe.
		{"kernel.shm_next_id", IPC},
		{"kernel.msg_next_id", IPC},
		{"fs.mqueue", NotNamespaced},
		{"kernel.domainnamex", NotNamespaced},
		{"", NotNamespaced},
	}
	for _, tt := range tests {
		if got := NamespaceOf(tt.name); got != tt.want {
			t.Errorf("NamespaceOf(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestNamespaceString(t *testing.T) {
	tests := []struct {
		ns   Namespace
		want string
	}{
		{NotNamespaced, "none"},
		{Net, "network"},
		{IPC, "ipc"},
		{UTS, "uts"},
		{User, "user"},
		{Namespace(99), "none"},
	}
	for _, tt := range tests {
		if got := tt.ns.String(); got != tt.want {
			t.Errorf("Namespace(%d).String() = %q, want %q", int(tt.ns), got, tt.want)
		}
	}
}

// The table's names and flags must be the kernel's and the OCI spec's: a
// typo here would send a write to the wrong namespace.
func TestNamespaceTable(t *testing.T) {
	tests := []struct {
		ns        Namespace
		oci, proc string
		flag      int
	}{
		{Net, "network", "net", unix.CLONE_NEWNET},
		{IPC, "ipc", "ipc", unix.CLONE_NEWIPC},
		{UTS, "uts", "uts", unix.CLONE_NEWUTS},
		{User, "user", "user", unix.CLONE_NEWUSER},
	}
	for _, tt := range tests {
		if got, ok := NamespaceByOCIName(tt.oci); !ok || got != tt.ns {
			t.Errorf("NamespaceByOCIName(%q) = %v, %v; want %v", tt.oci, got, ok, tt.ns)
		}
		if got := tt.ns.ProcName(); got != tt.proc {
			t.Errorf("%v.ProcName() = %q, want %q", tt.ns, got, tt.proc)
		}
		if _, err := os.Lstat("/proc/self/ns/" + tt.ns.ProcName()); err != nil {
			t.Errorf("%v: %v", tt.ns, err)
		}
		if got := tt.ns.CloneFlag(); got != tt.flag {
			t.Errorf("%v.CloneFlag() = %#x, want %#x", tt.ns, got, tt.flag)
		}
	}
	for _, name := range []string{"pid", "mount", "cgroup", "net", "", "none"} {
		if ns, ok := NamespaceByOCIName(name); ok {
			t.Errorf("NamespaceByOCIName(%q) = %v, want none", name, ns)
		}
	}
	// The host's namespaces, seen from pid 1, or from this process where
	// pid 1 is out of reach (the tests run in the host's namespaces).
	for _, ns := range []Namespace{Net, IPC, UTS, User} {
		var st unix.Stat_t
		if err := unix.Stat("/proc/1/ns/"+ns.ProcName(), &st); err != nil {
			if err := unix.Stat("/proc/self/ns/"+ns.ProcName(), &st); err != nil {
				t.Fatal(err)
			}
		}
		if st.Ino != ns.InitialInode() {
			t.Errorf("%v.InitialInode() = %#x, the host's is %#x", ns, ns.InitialInode(), st.Ino)
		}
	}
	if NotNamespaced.ProcName() != "" || NotNamespaced.CloneFlag() != 0 || Namespace(99).CloneFlag() != 0 || NotNamespaced.InitialInode() != 0 {
		t.Error("NotNamespaced has a /proc name or a clone flag")
	}
}

func TestValidateName(t *testing.T) {
	valid := []string{
		"net.ipv4.tcp_keepalive_time",
		"net.ipv4.conf.eth0/100.rp_filter",
		"net.ipv4.conf.all.rp_filter",
		"fs.file-max",
		"kernel.shm_rmid_forced",
		"a",
		"0",
		"a.b",
		"a/b",
		"net.ipv4.ip_local_port_range",
	}
	for _, name := range valid {
		if err := ValidateName(name); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", name, err)
		}
	}
	invalid := []struct{ raw, name string }{
		{"", ""},
		{"..", ".."},
		{".", "."},
		{"net..ipv4", "net..ipv4"},
		{"/net/ipv4", Normalize("/net/ipv4")},
		{"/net/ipv4 (as is)", "/net/ipv4"},
		{"net/../../kernel/core_pattern", Normalize("net/../../kernel/core_pattern")},
		{"net.ipv4/../..", "net.ipv4/../.."},
		{"net.ipv4/./x", "net.ipv4/./x"},
		{"Net.IPv4", "Net.IPv4"},
		{"net.ipv4.", "net.ipv4."},
		{".net.ipv4", ".net.ipv4"},
		{"net.ipv4/", "net.ipv4/"},
		{"net.ipv4 .x", "net.ipv4 .x"},
		{" net.ipv4.x", " net.ipv4.x"},
		{"net.ipv4.x ", "net.ipv4.x "},
		{"net.ipv4\x00.x", "net.ipv4\x00.x"},
		{"net.ipv4.x\n", "net.ipv4.x\n"},
		{"net.-ipv4", "net.-ipv4"},
		{"net.ipv4_", "net.ipv4_"},
		{"net.ipv4.conf.eth0@1.rp_filter", "net.ipv4.conf.eth0@1.rp_filter"},
		{"net.ipv4.conf.ethé.rp_filter", "net.ipv4.conf.ethé.rp_filter"},
		{"/proc/sys/net/x", Normalize("/proc/sys/net/x")},
		{"net\\ipv4", "net\\ipv4"},
	}
	for _, tt := range invalid {
		err := ValidateName(tt.name)
		if err == nil {
			t.Errorf("ValidateName(%q) [from %q] = nil, want an error", tt.name, tt.raw)
			continue
		}
		want := fmt.Sprintf("invalid sysctl name %q: want", tt.name) + " lower-case segments of [a-z0-9_-] separated by '.' (or '/'), with no empty segment"
		if tt.name == "" {
			want = "empty sysctl name"
		}
		if err.Error() != want {
			t.Errorf("ValidateName(%q) = %q, want %q", tt.name, err, want)
		}
	}
}

func TestValidateValue(t *testing.T) {
	valid := []string{
		"1",
		"0 2147483647",
		"4096\t87380\t6291456",
		"250 32000 100 128",
		" 1 ",
		"bbr",
		strings.Repeat("9", MaxValueLen),
	}
	for _, v := range valid {
		if err := ValidateValue(v); err != nil {
			t.Errorf("ValidateValue(%q) = %v, want nil", v, err)
		}
	}
	invalid := []struct{ value, want string }{
		{"", "empty value"},
		{" ", "empty value"},
		{"\t \t", "empty value"},
		{"\n", "empty value"},
		{"\r\n", "empty value"},
		{"\x00", "value contains a NUL byte"},
		{"1\x00", "value contains a NUL byte"},
		{"1\x002", "value contains a NUL byte"},
		{"1\n2", "value contains a newline"},
		{"1\n", "value contains a newline"},
		{"1\r", "value contains a newline"},
		{"1\r2", "value contains a newline"},
		{strings.Repeat("9", MaxValueLen+1), "value is 4097 bytes long; the kernel takes at most 4096"},
		{strings.Repeat("1 ", 1<<19), "value is 1048576 bytes long; the kernel takes at most 4096"},
	}
	for _, tt := range invalid {
		err := ValidateValue(tt.value)
		if err == nil || err.Error() != tt.want {
			t.Errorf("ValidateValue(%.20q...) = %v, want %q", tt.value, err, tt.want)
		}
	}
}

func TestPath(t *testing.T) {
	tests := []struct{ name, want string }{
		{"net.ipv4.conf.eth0/100.rp_filter", "/proc/sys/net/ipv4/conf/eth0.100/rp_filter"},
		{"net.ipv4.tcp_keepalive_time", "/proc/sys/net/ipv4/tcp_keepalive_time"},
		{"kernel.shm_rmid_forced", "/proc/sys/kernel/shm_rmid_forced"},
		{"fs.mqueue.msg_max", "/proc/sys/fs/mqueue/msg_max"},
		{"fs.file-max", "/proc/sys/fs/file-max"},
		{"kernel", "/proc/sys/kernel"},
	}
	for _, tt := range tests {
		if got := Path(tt.name); got != tt.want {
			t.Errorf("Path(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestProbeName(t *testing.T) {
	tests := []struct{ name, want string }{
		{"net.ipv4.conf.eth0.rp_filter", "net.ipv4.conf.default.rp_filter"},
		{"net.ipv4.conf.eth0/100.rp_filter", "net.ipv4.conf.default.rp_filter"},
		{"net.ipv6.conf.eth0.accept_ra", "net.ipv6.conf.default.accept_ra"},
		{"net.ipv4.conf.lo.rp_filter", "net.ipv4.conf.default.rp_filter"},
		{"net.ipv4.conf.all.rp_filter", "net.ipv4.conf.all.rp_filter"},
		{"net.ipv4.conf.default.rp_filter", "net.ipv4.conf.default.rp_filter"},
		{"net.ipv6.conf.all.forwarding", "net.ipv6.conf.all.forwarding"},
		{"net.ipv6.conf.default.forwarding", "net.ipv6.conf.default.forwarding"},
		// A fresh network namespace has no neigh "default" entry, only
		// one per interface, and "lo" is always there.
		{"net.ipv4.neigh.eth0.gc_stale_time", "net.ipv4.neigh.lo.gc_stale_time"},
		{"net.ipv6.neigh.eth0/100.retrans_time_ms", "net.ipv6.neigh.lo.retrans_time_ms"},
		{"net.ipv4.neigh.default.gc_thresh1", "net.ipv4.neigh.default.gc_thresh1"},
		{"net.ipv6.neigh.lo.retrans_time_ms", "net.ipv6.neigh.lo.retrans_time_ms"},
		// Not per-interface keys.
		{"net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_keepalive_time"},
		{"net.ipv4.conf", "net.ipv4.conf"},
		{"net.ipv4.conf.eth0", "net.ipv4.conf.eth0"},
		{"net.ipv4.conf..rp_filter", "net.ipv4.conf..rp_filter"},
		{"net.ipv4.confx.eth0.rp_filter", "net.ipv4.confx.eth0.rp_filter"},
		{"net.core.somaxconn", "net.core.somaxconn"},
		{"kernel.msgmax", "kernel.msgmax"},
		{"net.mpls.conf.eth0.input", "net.mpls.conf.eth0.input"},
	}
	for _, tt := range tests {
		if got := ProbeName(tt.name); got != tt.want {
			t.Errorf("ProbeName(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestValidateNamespaced(t *testing.T) {
	tests := []struct{ name, want string }{
		{"net.core.somaxconn", ""},
		{"kernel.sem", ""},
		{"kernel.domainname", ""},
		{"user.max_user_namespaces", ""},
		{"kernel.hostname", "kernel.hostname is set by the runtime from the pod's hostname; set the pod's hostname instead"},
		{"kernel.core_pattern", "kernel.core_pattern is not namespaced: setting it from a pod would change the whole node; set it on the host with /etc/sysctl.d instead"},
		{"vm.swappiness", "vm.swappiness is not namespaced: setting it from a pod would change the whole node; set it on the host with /etc/sysctl.d instead"},
	}
	for _, tt := range tests {
		err := ValidateNamespaced(tt.name)
		if got := errString(err); got != tt.want {
			t.Errorf("ValidateNamespaced(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestSysctl(t *testing.T) {
	tests := []struct {
		key, value       string
		wantKey, wantErr string
	}{
		{"net/ipv4/conf/eth0.100/rp_filter", "1", "net.ipv4.conf.eth0/100.rp_filter", ""},
		{"net.ipv4.ip_local_port_range", "1024\t65000", "net.ipv4.ip_local_port_range", ""},
		{"kernel/sem", "250 32000 100 128", "kernel.sem", ""},
		{"Net.IPv4.x", "1", "Net.IPv4.x", `invalid sysctl name "Net.IPv4.x": want lower-case segments of [a-z0-9_-] separated by '.' (or '/'), with no empty segment`},
		{"", "1", "", "empty sysctl name"},
		{"net/../../kernel/core_pattern", "|/bin/sh", "net.//.//.kernel.core_pattern", `invalid sysctl name "net.//.//.kernel.core_pattern": want lower-case segments of [a-z0-9_-] separated by '.' (or '/'), with no empty segment`},
		{"kernel/core_pattern", "core", "kernel.core_pattern", "kernel.core_pattern is not namespaced: setting it from a pod would change the whole node; set it on the host with /etc/sysctl.d instead"},
		{"kernel.hostname", "x", "kernel.hostname", "kernel.hostname is set by the runtime from the pod's hostname; set the pod's hostname instead"},
		// Name problems are reported before value problems.
		{"vm.swappiness", "", "vm.swappiness", "vm.swappiness is not namespaced: setting it from a pod would change the whole node; set it on the host with /etc/sysctl.d instead"},
		{"net.core.somaxconn", "", "net.core.somaxconn", "empty value"},
		{"net.core.somaxconn", "1\n", "net.core.somaxconn", "value contains a newline"},
		{"net.core.somaxconn", "1\x00", "net.core.somaxconn", "value contains a NUL byte"},
	}
	for _, tt := range tests {
		s := New(tt.key, tt.value)
		if s.Key() != tt.wantKey {
			t.Errorf("New(%q, %q).Key() = %q, want %q", tt.key, tt.value, s.Key(), tt.wantKey)
		}
		if s.Value() != tt.value {
			t.Errorf("New(%q, %q).Value() = %q, want %q", tt.key, tt.value, s.Value(), tt.value)
		}
		if got := errString(s.Validate()); got != tt.wantErr {
			t.Errorf("New(%q, %q).Validate() = %q, want %q", tt.key, tt.value, got, tt.wantErr)
		}
	}
	var zero Sysctl
	if got := errString(zero.Validate()); got != "empty sysctl name" {
		t.Errorf("Sysctl{}.Validate() = %q, want %q", got, "empty sysctl name")
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{
		"net/ipv4/conf/eth0.100/rp_filter",
		"net.ipv4.conf.eth0/100.rp_filter",
		"kernel/shm_rmid_forced",
		"net/../../kernel/core_pattern",
		"net.ipv4/../..",
		"/proc/sys/net/x",
		"..",
		"",
		"a",
		"\xff/a.b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		n := Normalize(in)
		if again := Normalize(n); again != n {
			t.Fatalf("Normalize not idempotent: %q -> %q -> %q", in, n, again)
		}
		if utf8.ValidString(in) {
			// Normalize only swaps '.' and '/', and only when '/' comes first.
			if len(n) != len(in) {
				t.Fatalf("Normalize(%q) = %q changed the length", in, n)
			}
			if n != in && strings.Map(swapDotSlash, n) != in {
				t.Fatalf("Normalize(%q) = %q is not a dot/slash swap", in, n)
			}
		}
		// Must not panic, whatever the name.
		_ = NamespaceOf(n)
		_ = ProbeName(n)
		_ = ValidateNamespaced(n)
		if ValidateName(n) != nil {
			return
		}
		for _, r := range n {
			if (r < 'a' || r > 'z') && (r < '0' || r > '9') && !strings.ContainsRune("._/-", r) {
				t.Fatalf("ValidateName accepted %q with %q", n, r)
			}
		}
		p := Path(n)
		rel, ok := strings.CutPrefix(p, "/proc/sys/")
		if !ok {
			t.Fatalf("Path(%q) = %q is not under /proc/sys/", n, p)
		}
		if filepath.Clean(p) != p {
			t.Fatalf("Path(%q) = %q is not clean", n, p)
		}
		for _, seg := range strings.Split(rel, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("Path(%q) = %q has segment %q", n, p, seg)
			}
		}
		// The file name under /proc/sys, normalized, gives the name back.
		if back := Normalize(rel); back != n {
			t.Fatalf("Normalize(%q) = %q, want %q (from Path(%q))", rel, back, n, n)
		}
		if err := ValidateName(ProbeName(n)); err != nil {
			t.Fatalf("ProbeName(%q) = %q is invalid: %v", n, ProbeName(n), err)
		}
	})
}

func TestKubernetesSafe(t *testing.T) {
	safe := []string{
		"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
		"net.ipv4.ip_unprivileged_port_start", "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
		"net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
		"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
	}
	for _, k := range safe {
		if !KubernetesSafe(k) {
			t.Errorf("%s: not safe, want safe", k)
		}
	}
	for _, k := range []string{"net.core.somaxconn", "kernel.msgmax", "net.ipv4.tcp_slow_start_after_idle", "net/ipv4/tcp_rmem", ""} {
		if KubernetesSafe(k) {
			t.Errorf("%q: safe, want unsafe (normalized keys only)", k)
		}
	}
	if len(kubernetesSafe) != len(safe) {
		t.Errorf("the table has %d keys, want %d", len(kubernetesSafe), len(safe))
	}
}
