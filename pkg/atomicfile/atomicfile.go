// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package atomicfile replaces a file whole or not at all: the plugin's
// last good config, and the per-pod state of what it wrote.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with text so that a crash or a power cut
// leaves either the old file or the new one, never a part: a temporary
// file in the same directory, synced, renamed over path, and the directory
// synced so that the rename survives a reboot.
func Write(path string, text []byte, mode os.FileMode) error {
	return write(path, text, mode, true)
}

// WriteVolatile replaces path with text so that a crash of the process
// leaves either the old file or the new one, as Write, but syncs nothing:
// for state that the machine's restart makes void anyway (the pods a pod
// state describes do not outlive it), where Write's two syncs per file
// would only cost the disk time the runtime needs.
func WriteVolatile(path string, text []byte, mode os.FileMode) error {
	return write(path, text, mode, false)
}

func write(path string, text []byte, mode os.FileMode, durable bool) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(mode); err != nil {
		return err
	}
	if _, err = tmp.Write(text); err != nil {
		return err
	}
	if durable {
		if err = tmp.Sync(); err != nil {
			return err
		}
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if !durable {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
