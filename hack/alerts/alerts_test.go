// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package alerts

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/prometheus/prometheus/model/labels"
	"gopkg.in/yaml.v3"
)

const (
	chartDir    = "../../config/helm/nri-sysctl"
	metricsList = "../../plugin/testdata/metrics.txt"
	kubeVersion = "v1.37.2"
)

// helmPath finds helm in the test cache (test/setup.sh builds it), as
// test/chart does.
func helmPath(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("NRI_SYSCTL_CACHE")
	if cache == "" {
		cache = "/var/cache/nri-sysctl-e2e"
	}
	version := os.Getenv("NRI_SYSCTL_HELM_VERSION")
	if version == "" {
		version = "v3.22.0"
	}
	p := filepath.Join(cache, "helm-"+version, "bin", "helm")
	if _, err := os.Stat(p); err != nil {
		// make test-all sets it: there, setup has just built helm, and a
		// skip would pass these checks without running them.
		if os.Getenv("NRI_SYSCTL_REQUIRE_HELM") == "1" {
			t.Fatalf("%s is missing, and NRI_SYSCTL_REQUIRE_HELM=1 (make test-all) forbids skipping the alert checks: does test/setup.sh build this helm version?", p)
		}
		t.Skipf("\n\n*** SKIPPING the alert checks: %s is missing; run `sudo test/setup.sh` ***\n", p)
	}
	return p
}

type obj = map[string]any

// rendered is the chart with its monitoring on, as helm template gives it.
func rendered(t *testing.T) []obj {
	t.Helper()
	args := []string{"template", "nri-sysctl", chartDir, "--namespace", "nri-sysctl", "--kube-version", kubeVersion,
		"--set", "podMonitor.enabled=true", "--set", "prometheusRule.enabled=true", "--set", "grafanaDashboard.enabled=true"}
	cmd := exec.Command(helmPath(t), args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	dec := yaml.NewDecoder(&stdout)
	var objs []obj
	for {
		var o obj
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("rendered YAML: %v", err)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
}

func find(t *testing.T, objs []obj, kind string) obj {
	t.Helper()
	for _, o := range objs {
		if o["kind"] == kind {
			return o
		}
	}
	t.Fatalf("no %s rendered", kind)
	return nil
}

func get(o any, path ...string) any {
	for _, k := range path {
		m, _ := o.(obj)
		o = m[k]
	}
	return o
}

func list(v any) []any { l, _ := v.([]any); return l }

// podMonitorTargetLabels are the labels every series scraped through the
// chart's PodMonitor carries: the Prometheus Operator's own for a
// PodMonitor (job, instance, namespace, pod, container, endpoint), and
// those its relabelings set. It returns the job they set too.
func podMonitorTargetLabels(t *testing.T, pm obj) ([]string, string) {
	t.Helper()
	labels := []string{"job", "instance", "namespace", "pod", "container", "endpoint"}
	job := ""
	endpoints := list(get(pm, "spec", "podMetricsEndpoints"))
	if len(endpoints) != 1 {
		t.Fatalf("PodMonitor endpoints %v, want one", endpoints)
	}
	for _, r := range list(get(endpoints[0], "relabelings")) {
		target, _ := get(r, "targetLabel").(string)
		if target == "" {
			continue
		}
		labels = append(labels, target)
		if target == "job" {
			job, _ = get(r, "replacement").(string)
		}
	}
	if job == "" {
		t.Fatalf("the PodMonitor sets no job: %v", endpoints[0])
	}
	return labels, job
}

func catalog(t *testing.T, targetLabels []string) Catalog {
	t.Helper()
	f, err := os.Open(metricsList)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := LoadCatalog(f, targetLabels)
	if err != nil {
		t.Fatalf("%s: %v", metricsList, err)
	}
	return c
}

// selectsJob reports selectors in expr without a matcher on job that
// admits job: each must look at the plugin's series alone.
func selectsJob(expr, job string) []string {
	var bad []string
	for _, vs := range Selectors(expr) {
		if !slices.ContainsFunc(vs.LabelMatchers, func(m *labels.Matcher) bool {
			return m.Name == "job" && m.Type != labels.MatchNotEqual && m.Type != labels.MatchNotRegexp && (strings.Contains(m.Value, "$") || m.Matches(job))
		}) {
			bad = append(bad, vs.String())
		}
	}
	return bad
}

var labelRef = regexp.MustCompile(`\$labels\.([A-Za-z_][A-Za-z0-9_]*)`)

// expandAnnotation expands an annotation as Prometheus does (its variables
// first, then the text as a Go template), with a value for each label of
// the alert's result, and stand-ins for the functions of Prometheus's
// templates the chart uses: a typo in a template, or a function that is
// not there, fails.
func expandAnnotation(text string, resultLabels map[string]bool) error {
	funcs := template.FuncMap{
		"humanize":         func(v float64) string { return fmt.Sprint(v) },
		"humanizeDuration": func(v float64) string { return fmt.Sprintf("%gs", v) },
	}
	tmpl, err := template.New("annotation").Option("missingkey=zero").Funcs(funcs).
		Parse("{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$value := .Value}}" + text)
	if err != nil {
		return err
	}
	data := struct {
		Labels, ExternalLabels map[string]string
		Value                  float64
	}{Labels: map[string]string{}, Value: 1.5}
	for l := range resultLabels {
		data.Labels[l] = "<" + l + ">"
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, data); err != nil {
		return err
	}
	if strings.Contains(b.String(), "{{") || strings.TrimSpace(b.String()) == "" {
		return fmt.Errorf("expands to %q", b.String())
	}
	return nil
}

// Every alert of the chart's PrometheusRule parses with Prometheus's
// parser, names only the plugin's metrics (and up) with labels and values
// they have, reads the PodMonitor's job only, and its annotations refer
// only to labels its result carries.
func TestRulesUseThePluginsMetrics(t *testing.T) {
	objs := rendered(t)
	targetLabels, job := podMonitorTargetLabels(t, find(t, objs, "PodMonitor"))
	c := catalog(t, targetLabels)
	rule := find(t, objs, "PrometheusRule")
	var alerts []string
	for _, g := range list(get(rule, "spec", "groups")) {
		for _, r := range list(get(g, "rules")) {
			name, _ := get(r, "alert").(string)
			expr, _ := get(r, "expr").(string)
			if name == "" || expr == "" {
				t.Errorf("rule %v: want an alert name and an expression", r)
				continue
			}
			alerts = append(alerts, name)
			out, problems := c.Check(expr)
			for _, p := range problems {
				t.Errorf("%s: %s", name, p)
			}
			for _, s := range selectsJob(expr, job) {
				t.Errorf("%s: %s does not select job %q, the PodMonitor's", name, s, job)
			}
			if sev, _ := get(r, "labels", "severity").(string); sev == "" {
				t.Errorf("%s: no severity label", name)
			}
			for _, a := range []string{"summary", "description"} {
				text, _ := get(r, "annotations", a).(string)
				if text == "" {
					t.Errorf("%s: no %s annotation", name, a)
				}
				if len(problems) > 0 {
					continue // the result's labels are not known
				}
				for _, m := range labelRef.FindAllStringSubmatch(text, -1) {
					if !out[m[1]] {
						t.Errorf("%s: %s uses $labels.%s, which its result lacks (it has %v)", name, a, m[1], slices.Sorted(maps.Keys(out)))
					}
				}
				if err := expandAnnotation(text, out); err != nil {
					t.Errorf("%s: %s: %v", name, a, err)
				}
			}
		}
	}
	// The README's alerts and the issue's: not registered (with up and
	// absent, which fire while the plugin is down), lookup and write
	// failures, containers lacking defaults, rejected configs.
	for _, want := range []string{"NriSysctlNotRegistered", "NriSysctlDown", "NriSysctlAbsent", "NriSysctlPodLookupFailed",
		"NriSysctlNamespaceWriteFailed", "NriSysctlContainersLackingDefaults", "NriSysctlConfigRejected"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s in %v", want, alerts)
		}
	}
}

// Every query of the dashboard (its panels' and its variables') parses
// with Prometheus's parser and names only the plugin's metrics, labels and
// values, for the job the dashboard's variable picks.
func TestDashboardUsesThePluginsMetrics(t *testing.T) {
	objs := rendered(t)
	targetLabels, _ := podMonitorTargetLabels(t, find(t, objs, "PodMonitor"))
	c := catalog(t, targetLabels)
	var data string
	for _, o := range objs {
		if o["kind"] == "ConfigMap" && get(o, "data", "nri-sysctl.json") != nil {
			data, _ = get(o, "data", "nri-sysctl.json").(string)
		}
	}
	if data == "" {
		t.Fatal("no dashboard ConfigMap (data nri-sysctl.json) rendered")
	}
	qs, err := DashboardQueries([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	panels := 0
	for _, q := range qs {
		out, problems := c.Check(q.PromQL())
		for _, p := range problems {
			t.Errorf("%s: %s", q.Where, p)
		}
		if q.Label != "" && len(problems) == 0 && !out[q.Label] {
			t.Errorf("%s: label_values of %q, which %s lacks", q.Where, q.Label, q.Expr)
		}
		if q.Label == "" {
			panels++
			for _, s := range selectsJob(q.PromQL(), "$job") {
				t.Errorf("%s: %s does not select job=~\"$job\"", q.Where, s)
			}
		}
	}
	if panels < 10 {
		t.Errorf("%d panel queries, want the plugin's key metrics (at least 10)", panels)
	}
	// Each metric the plugin serves is on the dashboard.
	seen := map[string]bool{}
	for _, q := range qs {
		for _, vs := range Selectors(q.PromQL()) {
			seen[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(vs.Name, "_bucket"), "_sum"), "_count")] = true
		}
	}
	for _, name := range c.Names() {
		if base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count"); !seen[base] {
			t.Errorf("metric %s is on no panel", name)
		}
	}
}

// The check finds what it is for: each mistake here is one an alert or a
// panel could make after a rename.
func TestCheckFindsMistakes(t *testing.T) {
	c, err := LoadCatalog(strings.NewReader(`# a comment
nri_sysctl_containers_total counter outcome=applied,lookup_failed
nri_sysctl_config_info gauge hash=* mode=*
nri_sysctl_pod_lookup_duration_seconds histogram
nri_sysctl_registered gauge
`), []string{"job", "node"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ expr, want string }{
		{`nri_sysctl_container_total`, `no metric "nri_sysctl_container_total"`},
		{`rate(nri_sysctl_containers_total{result="applied"}[5m])`, `has no label "result"`},
		{`nri_sysctl_containers_total{outcome="lookup_failure"}`, `never "lookup_failure"`},
		{`nri_sysctl_containers_total{outcome=~"lookup_failed|write_failed"}`, `never "write_failed"`},
		{`nri_sysctl_containers_total{outcome=~"write.*"}`, `matches none`},
		{`sum by (reason) (nri_sysctl_containers_total)`, `label "reason" is on none`},
		{`sum without (outcome) (nri_sysctl_containers_total) > on (outcome) nri_sysctl_registered`, `label "outcome" is on none`},
		{`sum by (job) (nri_sysctl_containers_total) / on (node) sum by (job) (nri_sysctl_registered)`, `label "node" is on none`},
		{`histogram_quantile(0.9, sum by (node) (rate(nri_sysctl_pod_lookup_duration_seconds_bucket[5m])))`, `"le"`},
		{`rate(nri_sysctl_pod_lookup_duration_seconds[5m])`, `no metric "nri_sysctl_pod_lookup_duration_seconds"`},
		{`label_replace(nri_sysctl_registered, "x", "$1", "host", "(.*)")`, `label "host" is on none`},
		{`sum(rate(nri_sysctl_containers_total[5m]) by (outcome)`, `does not parse`},
	} {
		_, problems := c.Check(tc.expr)
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
			t.Errorf("%s: problems %q, want one saying %q", tc.expr, problems, tc.want)
		}
	}
	for _, expr := range []string{
		`sum by (le, node) (rate(nri_sysctl_pod_lookup_duration_seconds_bucket{job="x"}[5m]))`,
		`count(count by (hash) (nri_sysctl_config_info)) > 1`,
		`nri_sysctl_containers_total{outcome=~"lookup_.*", node=~"$node"}`,
		`absent(up{job="x"})`,
		`count(up == 0) or vector(0)`,
	} {
		if _, problems := c.Check(expr); len(problems) != 0 {
			t.Errorf("%s: %q, want none", expr, problems)
		}
	}
	// absent's result carries the equality matchers' labels only, so an
	// annotation that names the node has nothing to show.
	if out, _ := c.Check(`absent(nri_sysctl_registered{job="x"})`); out["node"] || !out["job"] {
		t.Errorf("absent's labels %v, want job alone", out)
	}
	if out, _ := c.Check(`histogram_quantile(0.9, sum by (le, node) (rate(nri_sysctl_pod_lookup_duration_seconds_bucket[5m])))`); out["le"] || !out["node"] {
		t.Errorf("histogram_quantile's labels %v, want node without le", out)
	}
}

func TestLoadCatalogRefusesBadLines(t *testing.T) {
	for _, text := range []string{"nri_sysctl_x\n", "nri_sysctl_x summary\n", "nri_sysctl_x counter outcome\n"} {
		if _, err := LoadCatalog(strings.NewReader(text), nil); err == nil {
			t.Errorf("%q: loaded, want an error", text)
		}
	}
}

func TestDashboardQueriesReadsVariablesAndRows(t *testing.T) {
	qs, err := DashboardQueries([]byte(`{"panels":[{"title":"r","type":"row","panels":[{"title":"p","targets":[{"refId":"A","expr":"rate(x[$__rate_interval])"}]}]}],
"templating":{"list":[{"name":"node","type":"query","query":{"query":"label_values(x{job=\"$job\"}, node)"}},{"name":"ds","type":"datasource","query":"prometheus"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Query{{Where: `panel "p", query A`, Expr: "rate(x[$__rate_interval])"}, {Where: "variable node", Expr: `x{job="$job"}`, Label: "node"}}
	if fmt.Sprint(qs) != fmt.Sprint(want) || qs[0].PromQL() != "rate(x[5m])" {
		t.Errorf("queries %v (%q), want %v", qs, qs[0].PromQL(), want)
	}
	if _, err := DashboardQueries([]byte(`{"templating":{"list":[{"name":"v","type":"query","query":"up"}]}}`)); err == nil {
		t.Error("a variable query that is no label_values(...) was read")
	}
}
