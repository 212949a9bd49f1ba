// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package sysctl knows sysctl names: how to normalize them, which kernel
// namespace each belongs to, and where it lives under /proc/sys.
package sysctl

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Namespace is the kernel namespace a sysctl belongs to.
type Namespace int

const (
	// NotNamespaced sysctls are node-wide: setting one from a pod would
	// change the host.
	NotNamespaced Namespace = iota
	Net
	IPC
	UTS
	User
)

// namespaceKind is everything the plugin needs to know about one kind of
// namespace. Like Kubernetes' component-helpers sysctl table, it is the one
// place that says which namespace owns which sysctl.
type namespaceKind struct {
	oci       string // type name in the OCI runtime spec and the NRI pod
	proc      string // entry under /proc/<pid>/ns
	cloneFlag int    // for setns and clone
	// initInode is the inode number of the host's (initial) namespace
	// of this kind on nsfs, fixed by the kernel (include/linux/proc_ns.h:
	// IPC, UTS and user since 3.8, network since 6.x; older kernels give
	// the initial network namespace a number of 0xF0000000 or more, so
	// the constant never matches another namespace).
	initInode uint64
	// exact and prefixes follow Kubernetes' and runc's lists.
	exact    []string
	prefixes []string
}

var namespaceKinds = [...]namespaceKind{
	Net:  {oci: "network", proc: "net", cloneFlag: unix.CLONE_NEWNET, initInode: 0xEFFFFFF9, prefixes: []string{"net."}},
	IPC:  {oci: "ipc", proc: "ipc", cloneFlag: unix.CLONE_NEWIPC, initInode: 0xEFFFFFFF, exact: []string{"kernel.sem"}, prefixes: []string{"kernel.shm", "kernel.msg", "fs.mqueue."}},
	UTS:  {oci: "uts", proc: "uts", cloneFlag: unix.CLONE_NEWUTS, initInode: 0xEFFFFFFE, exact: []string{"kernel.domainname"}},
	User: {oci: "user", proc: "user", cloneFlag: unix.CLONE_NEWUSER, initInode: 0xEFFFFFFD, prefixes: []string{"user."}},
}

func (n Namespace) kind() (namespaceKind, bool) {
	if n <= NotNamespaced || int(n) >= len(namespaceKinds) {
		return namespaceKind{}, false
	}
	return namespaceKinds[n], true
}

// String gives the OCI namespace type name ("network", "ipc", ...).
func (n Namespace) String() string {
	if k, ok := n.kind(); ok {
		return k.oci
	}
	return "none"
}

// ProcName is the namespace's entry under /proc/<pid>/ns ("net", "ipc",
// ...), or "" for NotNamespaced.
func (n Namespace) ProcName() string {
	k, _ := n.kind()
	return k.proc
}

// CloneFlag is the namespace's CLONE_NEW* flag, or 0 for NotNamespaced.
func (n Namespace) CloneFlag() int {
	k, _ := n.kind()
	return k.cloneFlag
}

// InitialInode is the nsfs inode number of the host's namespace of this
// kind, or 0 for NotNamespaced.
func (n Namespace) InitialInode() uint64 {
	k, _ := n.kind()
	return k.initInode
}

// NamespaceByOCIName finds a namespace by its OCI type name, as the NRI pod
// sandbox lists them; ok is false for kinds no sysctl belongs to (pid,
// mount, cgroup, ...).
func NamespaceByOCIName(name string) (ns Namespace, ok bool) {
	for n := Net; int(n) < len(namespaceKinds); n++ {
		if namespaceKinds[n].oci == name {
			return n, true
		}
	}
	return NotNamespaced, false
}

// NamespaceOf tells which namespace a normalized (dot-form) name belongs to.
func NamespaceOf(name string) Namespace {
	for n := Net; int(n) < len(namespaceKinds); n++ {
		k := namespaceKinds[n]
		if slices.Contains(k.exact, name) {
			return n
		}
		for _, p := range k.prefixes {
			if strings.HasPrefix(name, p) {
				return n
			}
		}
	}
	return NotNamespaced
}

// Normalize converts a slash-separated name to the dot form, the way
// Kubernetes does: when the first separator is '/', dots and slashes swap,
// so "net/ipv4/conf/eth0.100/rp_filter" becomes "net.ipv4.conf.eth0/100.rp_filter".
func Normalize(name string) string {
	first := strings.IndexAny(name, "./")
	if first == -1 || name[first] == '.' {
		return name
	}
	return strings.Map(swapDotSlash, name)
}

// NormalizeKeys puts keys in slash form (as another plugin may set them on
// a container's spec) into dot form; in itself when every key is already.
func NormalizeKeys(in map[string]string) map[string]string {
	for k := range in {
		if Normalize(k) != k {
			out := make(map[string]string, len(in))
			for k, v := range in {
				out[Normalize(k)] = v
			}
			return out
		}
	}
	return in
}

func swapDotSlash(r rune) rune {
	switch r {
	case '.':
		return '/'
	case '/':
		return '.'
	}
	return r
}

// segment is Kubernetes' sysctl name segment; a normalized name is segments
// joined by '.', where a segment may itself contain '/' (a dot in the
// /proc/sys file name, as in an interface called "eth0.100").
const segment = `[a-z0-9]([-_a-z0-9]*[a-z0-9])?`

var nameRE = regexp.MustCompile(`^(` + segment + `[./])*` + segment + `$`)

// ValidateName checks the syntax of a normalized name. The pattern admits no
// empty segment, so "..", a leading '/' and other path escapes are refused.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("empty sysctl name")
	}
	if !nameRE.MatchString(name) {
		return fmt.Errorf("invalid sysctl name %q: want lower-case segments of [a-z0-9_-] separated by '.' (or '/'), with no empty segment", name)
	}
	return nil
}

// MaxValueLen is the longest value ValidateValue accepts: /proc/sys handlers
// read at most a page, so a longer write would fail in every pod.
const MaxValueLen = 4096

// ValidateValue refuses values that /proc/sys would misread or that could
// smuggle a second write.
func ValidateValue(value string) error {
	switch {
	case strings.TrimSpace(value) == "":
		return fmt.Errorf("empty value")
	case strings.ContainsRune(value, 0):
		return fmt.Errorf("value contains a NUL byte")
	case strings.ContainsAny(value, "\n\r"):
		return fmt.Errorf("value contains a newline")
	case len(value) > MaxValueLen:
		return fmt.Errorf("value is %d bytes long; the kernel takes at most %d", len(value), MaxValueLen)
	}
	return nil
}

// Path is the file under /proc/sys for a normalized name.
func Path(name string) string {
	return "/proc/sys/" + strings.Map(swapDotSlash, name)
}

// perInterface lists keys whose fourth segment is an interface name. The
// interface does not exist in a fresh namespace, so the kernel probe checks
// an entry that does: "default" for conf, and "lo" for neigh, whose
// "default" entry exists only in the host's network namespace.
var perInterface = []struct{ prefix, stand string }{
	{"net.ipv4.conf.", "default"},
	{"net.ipv6.conf.", "default"},
	{"net.ipv4.neigh.", "lo"},
	{"net.ipv6.neigh.", "lo"},
}

// ProbeName is the name whose existence in a fresh namespace shows that name
// can be set in a pod: itself, or the stand-in entry of a per-interface key.
func ProbeName(name string) string {
	for _, p := range perInterface {
		if !strings.HasPrefix(name, p.prefix) {
			continue
		}
		rest := name[len(p.prefix):]
		dot := strings.IndexByte(rest, '.')
		if dot <= 0 {
			return name
		}
		iface := rest[:dot]
		if iface == "all" || iface == "default" {
			return name
		}
		return p.prefix + p.stand + rest[dot:]
	}
	return name
}

// ErrMissing marks a sysctl that a fresh pod namespace does not have.
var ErrMissing = errors.New("does not exist in a fresh pod namespace on this kernel")

// ErrReadOnly marks a sysctl that a fresh pod namespace has but that cannot
// be set there (net.core.rmem_max, for one, on 6.x kernels).
var ErrReadOnly = errors.New("is read-only inside a pod's namespace on this kernel (only the host's value can be changed; use /etc/sysctl.d)")

// ErrNotASysctl marks a name that is a /proc/sys directory ("net.ipv4"),
// which passes ValidateName but cannot hold a value.
var ErrNotASysctl = errors.New("is a directory, not a sysctl")

// Sysctl is one normalized name and its value.
type Sysctl struct {
	key, value string
}

// New returns a Sysctl with a normalized key.
func New(key, value string) Sysctl {
	return Sysctl{key: Normalize(key), value: value}
}

func (s Sysctl) Key() string   { return s.key }
func (s Sysctl) Value() string { return s.value }

// Validate checks the name, the value and that the sysctl may be set from a
// pod at all (namespaced, and not owned by the runtime).
func (s Sysctl) Validate() error {
	if err := ValidateName(s.key); err != nil {
		return err
	}
	if err := ValidateNamespaced(s.key); err != nil {
		return err
	}
	return ValidateValue(s.value)
}

// ValidateNamespaced refuses node-wide sysctls and kernel.hostname.
func ValidateNamespaced(name string) error {
	if name == "kernel.hostname" {
		return fmt.Errorf("kernel.hostname is set by the runtime from the pod's hostname; set the pod's hostname instead")
	}
	if NamespaceOf(name) == NotNamespaced {
		return fmt.Errorf("%s is not namespaced: setting it from a pod would change the whole node; set it on the host with /etc/sysctl.d instead", name)
	}
	return nil
}

// Writer is who writes a pod's sysctls. In a pod with its own user
// namespace the kernel lets different keys through for each.
type Writer int

const (
	// WriterInPod is runc, writing as the root of the pod's user
	// namespace (spec mode).
	WriterInPod Writer = iota
	// WriterHost is the plugin, writing as host root from the host's
	// user namespace (namespace mode).
	WriterHost
)

func (w Writer) String() string {
	switch w {
	case WriterInPod:
		return "runc in the pod"
	case WriterHost:
		return "host root"
	}
	return fmt.Sprintf("Writer(%d)", int(w))
}
