// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podns

import (
	"errors"
	"fmt"
	"os"

	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

// WriteError is one sysctl that could not be written: its key, the value
// tried and why (the errno, for a write the kernel refused).
type WriteError struct {
	Key   string
	Value string
	Err   error
}

func (e WriteError) Error() string { return fmt.Sprintf("%s %q: %v", e.Key, e.Value, e.Err) }

// Write sets each sysctl inside the target namespaces. It returns one error
// per failed key; the others are still written.
func (h Host) Write(t Target, sysctls []sysctl.Sysctl) []WriteError {
	var errs []WriteError
	h.k.OnThread(func() { errs = writeLocked(h.k, t, sysctls) })
	return errs
}

// Write is Linux.Write.
func Write(t Target, sysctls []sysctl.Sysctl) []WriteError { return Linux.Write(t, sysctls) }

func writeLocked(k Kernel, t Target, sysctls []sysctl.Sysctl) []WriteError {
	ps := k.ProcSys()
	defer ps.Close()
	return writeEntered(newEntered(k, t, "write"), ps, sysctls)
}

// writeEntered writes each sysctl through in and ps, on its locked thread,
// first making sure ps can be written (ProcSys.Writable): what /proc/sys
// shows follows the namespaces the thread entered, before or after.
func writeEntered(in *entered, ps ProcSys, sysctls []sysctl.Sysctl) []WriteError {
	var errs []WriteError
	if err := ps.Writable(); err != nil {
		for _, s := range sysctls {
			errs = append(errs, WriteError{Key: s.Key(), Value: s.Value(), Err: err})
		}
		return errs
	}
	for _, s := range sysctls {
		if err := in.into(s.Key()); err != nil {
			errs = append(errs, WriteError{Key: s.Key(), Value: s.Value(), Err: err})
			continue
		}
		if err := ps.Write(s.Key(), s.Value()); err != nil {
			errs = append(errs, WriteError{Key: s.Key(), Value: s.Value(), Err: unwrapPathError(err)})
		}
	}
	return errs
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("writing %s: %w", pe.Path, pe.Err)
	}
	return err
}
