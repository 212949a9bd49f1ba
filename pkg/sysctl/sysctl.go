// Package sysctl knows sysctl names: how to normalize them, which kernel
// namespace each belongs to, and where it lives under /proc/sys.
package sysctl

import (
	"fmt"
	"regexp"
	"strings"
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

// String gives the OCI namespace type name ("network", "ipc", ...).
func (n Namespace) String() string {
	switch n {
	case Net:
		return "network"
	case IPC:
		return "ipc"
	case UTS:
		return "uts"
	case User:
		return "user"
	}
	return "none"
}

// ipcExact and ipcPrefixes follow Kubernetes' and runc's lists of IPC
// namespaced sysctls.
var (
	ipcExact    = map[string]bool{"kernel.sem": true}
	ipcPrefixes = []string{"kernel.shm", "kernel.msg", "fs.mqueue."}
)

// NamespaceOf tells which namespace a normalized (dot-form) name belongs to.
func NamespaceOf(name string) Namespace {
	switch {
	case strings.HasPrefix(name, "net."):
		return Net
	case strings.HasPrefix(name, "user."):
		return User
	case name == "kernel.domainname":
		return UTS
	case ipcExact[name]:
		return IPC
	}
	for _, p := range ipcPrefixes {
		if strings.HasPrefix(name, p) {
			return IPC
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
