// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package probe

import (
	"errors"
	"io"
	"os"
	"sort"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
	"golang.org/x/sys/unix"
)

// maxSysctlText bounds a read of one sysctl file: the kernel prints one
// page at most.
const maxSysctlText = 64 << 10

// tryValues writes each value to the sysctl file at path, as the pod's
// writer will, reads back what the kernel stored, and puts the file's
// first text back, so that each value meets the namespace as a pod's
// would: a refused vector can store its first fields (kernel.sem "1 2 abc"
// does). It runs in throw-away namespaces only.
func tryValues(path string, values []string) map[string]sysctl.Stored {
	out := make(map[string]sysctl.Stored, len(values))
	restore := restorer(path)
	for _, v := range values {
		if _, done := out[v]; done {
			continue
		}
		out[v] = tryValue(path, v)
		restore()
	}
	return out
}

// restorer reads the file's text now and returns what writes it back;
// a file that cannot be read (write-only) is left as it is.
func restorer(path string) func() {
	first, err := readSysctl(path)
	if err != nil {
		return func() {}
	}
	return func() { _ = writeSysctl(path, first) }
}

// afterWrite, when set, is called after each write the kernel took and
// before anything else is written or read. Only tests set it: to stop the
// probe between a write and its restore.
var afterWrite func(path string)

func tryValue(path, value string) sysctl.Stored {
	if err := writeSysctl(path, value); err != nil {
		return sysctl.Stored{Err: err}
	}
	if afterWrite != nil {
		afterWrite(path)
	}
	text, err := readSysctl(path)
	if err != nil {
		return sysctl.Stored{Unreadable: true}
	}
	s := sysctl.Stored{Text: text}
	if sysctl.Fold(text) != sysctl.Fold(value) {
		// The kernel's own form must stay itself when written back.
		if err := writeSysctl(path, text); err != nil {
			s.Again = "(refused: " + err.Error() + ")"
		} else if again, err := readSysctl(path); err == nil {
			s.Again = again
		}
	}
	return s
}

// writeSysctl writes value as runc and the namespace-mode writer do
// (os.WriteFile: a short write is written on from where it stopped) and
// returns the errno.
func writeSysctl(path, value string) error {
	err := os.WriteFile(path, []byte(value), 0o644)
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// readSysctl reads the file without its trailing newline.
func readSysctl(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOCTTY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSysctlText))
	if err != nil {
		return "", err
	}
	if len(b) > 0 && b[len(b)-1] == '\n' {
		b = b[:len(b)-1]
	}
	return string(b), nil
}

// sortedNames lists the names of values in a fixed order, so that probe
// runs repeat.
func sortedNames(values map[string][]string) []string {
	names := make([]string, 0, len(values))
	for n := range values {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
