// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package chart

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const repoRoot = "../.."

// makeChart runs make chart at version (empty: the file VERSION's) into a
// temporary directory with the tests' helm, and returns the .tgz it says
// it wrote.
func makeChart(t *testing.T, version string) string {
	t.Helper()
	out := t.TempDir()
	args := []string{"-C", repoRoot, "--no-print-directory", "chart", "CHART_OUT=" + out, "HELM=" + helmPath(t)}
	if version != "" {
		args = append(args, "VERSION="+version)
	}
	text, err := exec.Command("make", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, text)
	}
	tgzs, _ := filepath.Glob(filepath.Join(out, "*.tgz"))
	if len(tgzs) != 1 || !strings.Contains(string(text), tgzs[0]) {
		t.Fatalf("make chart wrote %v, want one .tgz, the one it names:\n%s", tgzs, text)
	}
	return tgzs[0]
}

// mapped is the one version in format, as hack/version gives it.
func mapped(t *testing.T, format string) string {
	t.Helper()
	cmd := exec.Command("go", "run", "./hack/version", format)
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go run ./hack/version %s: %v", format, err)
	}
	return strings.TrimSpace(string(out))
}

// packagedFiles returns the files of a chart package by path inside the
// chart (without the leading chart directory).
func packagedFiles(t *testing.T, tgz string) map[string][]byte {
	t.Helper()
	data, err := os.ReadFile(tgz)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: %v", tgz, err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", tgz, err)
		}
		name, ok := strings.CutPrefix(h.Name, "nri-sysctl/")
		if !ok {
			t.Errorf("%s holds %s, outside the chart's directory nri-sysctl/", tgz, h.Name)
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
}

// checkPackage: the package is named for the chart version; its Chart.yaml
// has version and appVersion chartVersion; every other file is the chart
// directory's, byte for byte; helm lint --strict passes on it; and the
// DaemonSet it renders runs the image make image writes, tagged ociTag.
func checkPackage(t *testing.T, tgz, chartVersion, ociTag string) {
	t.Helper()
	if got, want := filepath.Base(tgz), "nri-sysctl-"+chartVersion+".tgz"; got != want {
		t.Errorf("package %s, want %s", got, want)
	}
	files := packagedFiles(t, tgz)
	var meta struct {
		Name, Version string
		AppVersion    string `yaml:"appVersion"`
	}
	if err := yaml.Unmarshal(files["Chart.yaml"], &meta); err != nil {
		t.Fatalf("%s: Chart.yaml: %v", tgz, err)
	}
	if meta.Name != "nri-sysctl" || meta.Version != chartVersion || meta.AppVersion != chartVersion {
		t.Errorf("%s: Chart.yaml name %q version %q appVersion %q, want nri-sysctl, %s, %s", tgz, meta.Name, meta.Version, meta.AppVersion, chartVersion, chartVersion)
	}
	for name, data := range files {
		if name == "Chart.yaml" {
			continue
		}
		want, err := os.ReadFile(filepath.Join(chartDir, name))
		if err != nil || !bytes.Equal(data, want) {
			t.Errorf("%s: %s differs from the chart directory's (%v)", tgz, name, err)
		}
	}
	for _, f := range []string{"values.yaml", "values.schema.json", "README.md", "templates/daemonset.yaml"} {
		if files[f] == nil {
			t.Errorf("%s lacks %s", tgz, f)
		}
	}

	lint, err := helm(t, "lint", "--strict", tgz, "--kube-version", kubeVersion)
	if err != nil || !strings.Contains(lint, "0 chart(s) failed") {
		t.Errorf("helm lint --strict %s: %v\n%s", tgz, err, lint)
	}

	out, err := helm(t, "template", "nri-sysctl", tgz, "--namespace", "nri-sysctl", "--kube-version", kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	ds := find(t, decodeAll(t, out), "DaemonSet")
	// The chart's default repository is the Makefile's IMAGE_NAME.
	if got, want := get(ds, "spec", "template", "spec", "containers", 0, "image"), "localhost/nri-sysctl:"+ociTag; got != want {
		t.Errorf("%s renders image %v, want %s (the image make image tags)", tgz, got, want)
	}
}

// TestChartPackage: make chart packages the chart at the one version, and
// at a pre-release with build metadata, whose "+" Helm keeps and an image
// tag cannot.
func TestChartPackage(t *testing.T) {
	t.Run("VERSION", func(t *testing.T) {
		checkPackage(t, makeChart(t, ""), mapped(t, "helm"), mapped(t, "oci"))
	})
	t.Run("pre-release with build metadata", func(t *testing.T) {
		checkPackage(t, makeChart(t, "0.3.0-rc.1+build.5"), "0.3.0-rc.1+build.5", "0.3.0-rc.1_build.5")
	})
}
