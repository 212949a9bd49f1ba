// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Command chartdate makes a chart archive reproducible: helm package stamps
// every file with the time it ran, so two packagings of one chart differ.
// It rewrites the archive in place with every file's time set to the
// given Unix time (make chart passes SOURCE_DATE_EPOCH, the commit's time)
// and nothing else changed: the same files, in the same order, with the
// same modes and contents, and helm's gzip header.
//
//	go run ./hack/chartdate -epoch SECONDS CHART.tgz
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/atomicfile"
)

func main() {
	epoch := flag.Int64("epoch", -1, "the time every file gets, in Unix seconds (SOURCE_DATE_EPOCH)")
	flag.Parse()
	if flag.NArg() != 1 || *epoch < 0 {
		fmt.Fprintln(os.Stderr, "usage: chartdate -epoch SECONDS CHART.tgz")
		os.Exit(2)
	}
	if err := redate(flag.Arg(0), time.Unix(*epoch, 0).UTC()); err != nil {
		fmt.Fprintln(os.Stderr, "chartdate:", err)
		os.Exit(1)
	}
}

// redate rewrites the archive at path with every file at time t.
func redate(path string, t time.Time) error {
	in, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := withTime(in, t)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, out, info.Mode().Perm())
}

// withTime is the gzip-compressed tar archive in, with every entry's time
// set to t.
func withTime(in []byte, t time.Time) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(in))
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Header = zr.Header
	zw.ModTime = time.Time{}
	tr := tar.NewReader(zr)
	tw := tar.NewWriter(zw)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if filepath.IsAbs(hdr.Name) {
			return nil, fmt.Errorf("entry %q: an absolute path", hdr.Name)
		}
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = t, time.Time{}, time.Time{}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
