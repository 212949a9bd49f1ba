// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"testing"
	"time"
)

type entry struct {
	name string
	mode int64
	data string
}

var chartFiles = []entry{
	{"nri-sysctl/Chart.yaml", 0o644, "name: nri-sysctl\n"},
	{"nri-sysctl/templates/daemonset.yaml", 0o644, "kind: DaemonSet\n"},
	{"nri-sysctl/values.yaml", 0o600, "image: x\n"},
}

// packaged is what helm package writes: the files stamped with when it
// ran, and its gzip header.
func packaged(t *testing.T, when time.Time) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Extra = []byte("+aHR0cHM6Ly95b3V0dS5iZS96OVV6MWljandyTQo=")
	zw.Comment = "Helm"
	tw := tar.NewWriter(zw)
	for _, f := range chartFiles {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: when}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestTwoPackagingsBecomeOne(t *testing.T) {
	epoch := time.Unix(1764806400, 0).UTC()
	first := packaged(t, time.Date(2026, 12, 4, 21, 17, 1, 0, time.UTC))
	second := packaged(t, time.Date(2026, 12, 4, 21, 17, 3, 0, time.UTC))
	if bytes.Equal(first, second) {
		t.Fatal("the two packagings are equal before: the test shows nothing")
	}
	a, err := withTime(first, epoch)
	if err != nil {
		t.Fatal(err)
	}
	b, err := withTime(second, epoch)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("the two packagings differ after chartdate")
	}

	zr, err := gzip.NewReader(bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Comment != "Helm" || string(zr.Extra) != "+aHR0cHM6Ly95b3V0dS5iZS96OVV6MWljandyTQo=" {
		t.Errorf("helm's gzip header is lost: comment %q, extra %q", zr.Comment, zr.Extra)
	}
	tr := tar.NewReader(zr)
	for i := 0; ; i++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if i != len(chartFiles) {
				t.Errorf("%d files, want %d", i, len(chartFiles))
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		want := chartFiles[i]
		if hdr.Name != want.name || hdr.Mode != want.mode || string(data) != want.data || !hdr.ModTime.Equal(epoch) {
			t.Errorf("file %d: %s mode %o %q at %v; want %s mode %o %q at %v", i, hdr.Name, hdr.Mode, data, hdr.ModTime, want.name, want.mode, want.data, epoch)
		}
	}
}

func TestRefusesWhatIsNotAChartArchive(t *testing.T) {
	if _, err := withTime([]byte("not gzip"), time.Unix(0, 0)); err == nil {
		t.Error("rewrote a file that is not gzip")
	}
}
