// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bufio"
	"debug/buildinfo"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/runtimemode"
)

const compatibilityDoc = "docs/modes-and-runtimes.md"

// TestVendoredNRIMatchesTheDocs reads the NRI module compiled into the
// containerd this run tests (what `go version -m` prints) and holds
// compatibilityDoc's row for that release to it, and the plugin's own
// release table to the mode that NRI calls for. A new patch that moves
// its line to another NRI fails here before anyone relies on the row.
func TestVendoredNRIMatchesTheDocs(t *testing.T) {
	version := harnessContainerdVersion()
	bin := filepath.Join(containerdBinDir(envOr("NRI_SYSCTL_CACHE", defaultCache), version), "containerd")
	if _, err := os.Stat(bin); err != nil {
		if skip := skipReason(); skip != "" {
			t.Skip(skip)
		}
		t.Fatalf("%s is missing: run `sudo test/setup.sh %s` first", bin, version)
	}
	built, err := moduleVersions(bin)
	if err != nil {
		t.Fatal(err)
	}
	// A release built with a newer NRI (test/setup.sh's VERSION+nri.vX.Y.Z)
	// is no release: it must carry that NRI, and has no row.
	release, withNRI, rebuilt := strings.Cut(version, "+nri.")
	if got := firstOf(built, "github.com/containerd/containerd/v2", "github.com/containerd/containerd"); got != release {
		t.Fatalf("%s is containerd %q, want %s: the cache holds another build", bin, got, release)
	}
	nri := built["github.com/containerd/nri"]
	if nri == "" {
		t.Fatalf("%s: no github.com/containerd/nri in its build info", bin)
	}
	if rebuilt {
		if nri != withNRI {
			t.Errorf("%s was to be built with NRI %s; it has %s", bin, withNRI, nri)
		}
		return
	}

	row, err := compatibilityRow(filepath.Join("..", "..", compatibilityDoc), strings.TrimPrefix(release, "v"))
	if err != nil {
		t.Fatal(err)
	}
	if documented := strings.Fields(row.nri)[0]; documented != nri {
		t.Errorf("%s says containerd %s vendors NRI %s; its binary has %s: fix the row", compatibilityDoc, row.release, documented, nri)
	}

	// Releases before NRI v0.12 report no NRI version: the plugin's
	// table must lead it to the mode the compiled NRI calls for.
	fromTable, reason := runtimemode.Decide(runtimemode.Runtime{Name: "containerd", Version: version})
	fromBinary, _ := runtimemode.Decide(runtimemode.Runtime{Name: "containerd", Version: version, NRIVersion: nri})
	if fromTable != fromBinary {
		t.Errorf("pkg/runtimemode's release table chooses %s for containerd %s (%s); its NRI %s calls for %s", fromTable, version, reason, nri, fromBinary)
	}
	if row.mode != string(fromBinary) {
		t.Errorf("%s says the plugin chooses %q on containerd %s; it chooses %s", compatibilityDoc, row.mode, row.release, fromBinary)
	}
}

// moduleVersions maps each module compiled into bin to its version.
func moduleVersions(bin string) (map[string]string, error) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("build info of %s: %w", bin, err)
	}
	versions := map[string]string{info.Main.Path: info.Main.Version}
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		versions[d.Path] = d.Version
	}
	return versions, nil
}

func firstOf(versions map[string]string, paths ...string) string {
	for _, p := range paths {
		if v := versions[p]; v != "" {
			return v
		}
	}
	return ""
}

type compatibility struct{ release, nri, mode string }

// compatibilityRow finds release's row in the doc's table
// (| containerd | NRI vendored | mode chosen | how it was verified |).
func compatibilityRow(doc, release string) (compatibility, error) {
	f, err := os.Open(doc)
	if err != nil {
		return compatibility{}, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		cells := strings.Split(sc.Text(), "|")
		if len(cells) < 5 || strings.TrimSpace(cells[1]) != release {
			continue
		}
		row := compatibility{release: release, nri: strings.TrimSpace(cells[2]), mode: strings.TrimSpace(cells[3])}
		if row.nri == "" {
			return compatibility{}, fmt.Errorf("%s: containerd %s's row has no NRI version", doc, release)
		}
		return row, nil
	}
	if err := sc.Err(); err != nil {
		return compatibility{}, err
	}
	return compatibility{}, fmt.Errorf("%s has no row for containerd %s in its compatibility table: add the release the suite tests", doc, release)
}
