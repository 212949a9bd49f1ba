// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

var updateMetricsList = flag.Bool("update", false, "rewrite testdata/metrics.txt from the registry")

// metricsList is what hack/alerts checks the chart's alerts and dashboard
// against: a renamed metric or a changed label here then fails there.
const metricsList = "testdata/metrics.txt"

// openLabels are labels whose values are not known before a scrape (the
// config's hash, the mode chosen): the list says * for them.
var openLabels = map[string][]string{"nri_sysctl_config_info": {"hash", "mode"}}

// TestMetricsListMatchesRegistry: testdata/metrics.txt lists every metric
// the registry serves at the first scrape, its type, and each label with
// its values (counters carry every label value from the start). Run with
// -update to rewrite it after a deliberate change.
func TestMetricsListMatchesRegistry(t *testing.T) {
	_, m := newMeteredTestPlugin(t, testConfig, &fakeFetcher{})
	families, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := renderMetricsList(families)
	if *updateMetricsList {
		if err := os.WriteFile(metricsList, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(metricsList)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		fileLines, registryLines := strings.Split(string(got), "\n"), strings.Split(want, "\n")
		var diff strings.Builder
		for _, l := range fileLines {
			if !slices.Contains(registryLines, l) {
				fmt.Fprintf(&diff, "\n- %s (file only)", l)
			}
		}
		for _, l := range registryLines {
			if !slices.Contains(fileLines, l) {
				fmt.Fprintf(&diff, "\n+ %s (registry only)", l)
			}
		}
		t.Fatalf("%s differs from the registry:%s\nAfter a deliberate change rerun with -update, then make the chart's alerts and dashboard follow (cd hack/alerts && go test ./...).", metricsList, diff.String())
	}
}

func renderMetricsList(families []*dto.MetricFamily) string {
	var b strings.Builder
	b.WriteString("# Every metric the plugin serves: name, type, label=values (* for any value).\n" +
		"# Written by `go test ./plugin -run TestMetricsListMatchesRegistry -update`; checked\n" +
		"# against the registry by that test, and read by hack/alerts, which checks the\n" +
		"# chart's alerts and dashboard against it.\n")
	for _, f := range families {
		values := map[string][]string{}
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				if !slices.Contains(values[l.GetName()], l.GetValue()) {
					values[l.GetName()] = append(values[l.GetName()], l.GetValue())
				}
			}
		}
		fmt.Fprintf(&b, "%s %s", f.GetName(), strings.ToLower(f.GetType().String()))
		names := make([]string, 0, len(values))
		for name := range values {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			vals := values[name]
			if slices.Contains(openLabels[f.GetName()], name) {
				vals = []string{"*"}
			}
			slices.Sort(vals)
			fmt.Fprintf(&b, " %s=%s", name, strings.Join(vals, ","))
		}
		b.WriteString("\n")
	}
	return b.String()
}
