// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package chart

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

// The monitoring objects: each toggle renders its object and nothing
// else; all are off by default, since a cluster without the Prometheus
// Operator lacks their kinds. hack/alerts checks the rules' and the
// dashboard's PromQL against the plugin's metrics.

func findAll(objs []obj, kind string) []obj {
	var out []obj
	for _, o := range objs {
		if o["kind"] == kind {
			out = append(out, o)
		}
	}
	return out
}

func dashboardConfigMap(objs []obj) obj {
	for _, o := range findAll(objs, "ConfigMap") {
		if get(o, "data", "nri-sysctl.json") != nil {
			return o
		}
	}
	return nil
}

// podTemplateLabels are the DaemonSet pods' labels.
func podTemplateLabels(t *testing.T, objs []obj) obj {
	t.Helper()
	ds := find(t, objs, "DaemonSet")
	l, _ := get(ds, "spec", "template", "metadata", "labels").(obj)
	if len(l) == 0 {
		t.Fatal("the DaemonSet's pods have no labels")
	}
	return l
}

// matches reports whether selector's matchLabels all hold in labels.
func matches(selector, labels obj) bool {
	ml, _ := get(selector, "matchLabels").(obj)
	if len(ml) == 0 {
		return false
	}
	for k, v := range ml {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestMonitoringOffByDefault(t *testing.T) {
	objs := render(t)
	if len(findAll(objs, "PodMonitor"))+len(findAll(objs, "PrometheusRule"))+len(findAll(objs, "ServiceMonitor"))+len(findAll(objs, "Service")) != 0 || dashboardConfigMap(objs) != nil {
		t.Errorf("monitoring objects rendered with the default values: %v", objs)
	}
}

func TestTemplatePodMonitor(t *testing.T) {
	objs := render(t, "podMonitor.enabled=true", "podMonitor.labels.release=kube-prometheus-stack")
	pms := findAll(objs, "PodMonitor")
	if len(pms) != 1 || len(findAll(objs, "PrometheusRule")) != 0 || dashboardConfigMap(objs) != nil {
		t.Fatalf("podMonitor alone: %d PodMonitors, want one and nothing else", len(pms))
	}
	pm := pms[0]
	if pm["apiVersion"] != "monitoring.coreos.com/v1" || get(pm, "metadata", "namespace") != "nri-sysctl" {
		t.Errorf("PodMonitor %v %v, want monitoring.coreos.com/v1 in nri-sysctl", pm["apiVersion"], get(pm, "metadata"))
	}
	if get(pm, "metadata", "labels", "release") != "kube-prometheus-stack" || get(pm, "metadata", "labels", "app.kubernetes.io/name") != "nri-sysctl" {
		t.Errorf("PodMonitor labels %v, want the chart's and podMonitor.labels", get(pm, "metadata", "labels"))
	}
	pod := podTemplateLabels(t, objs)
	if !matches(get(pm, "spec", "selector").(obj), pod) {
		t.Errorf("PodMonitor selector %v does not select the DaemonSet's pods %v", get(pm, "spec", "selector"), pod)
	}
	if got := get(pm, "spec", "namespaceSelector", "matchNames"); !reflect.DeepEqual(got, []any{"nri-sysctl"}) {
		t.Errorf("namespaceSelector %v, want the release's namespace", got)
	}
	eps := asList(get(pm, "spec", "podMetricsEndpoints"))
	if len(eps) != 1 {
		t.Fatalf("endpoints %v, want one", eps)
	}
	ep := eps[0].(obj)
	d, _ := renderDaemonSet(t, "podMonitor.enabled=true")
	port := get(d.ctr, "ports").([]any)[0].(obj)
	if ep["port"] != port["name"] || ep["path"] != "/metrics" || ep["interval"] != "30s" || ep["scrapeTimeout"] != "10s" {
		t.Errorf("endpoint %v, want the container's port %v, /metrics, 30s, 10s", ep, port)
	}
	relabel := map[string]any{}
	for _, r := range asList(ep["relabelings"]) {
		relabel[get(r, "targetLabel").(string)] = r
	}
	if get(relabel["job"], "replacement") != "nri-sysctl" || !reflect.DeepEqual(get(relabel["node"], "sourceLabels"), []any{"__meta_kubernetes_pod_node_name"}) {
		t.Errorf("relabelings %v, want job nri-sysctl and node from the pod's node", ep["relabelings"])
	}
	// The NetworkPolicy admits the scrape: its default scrapers select the
	// pods the Prometheus Operator makes for a Prometheus (labelled
	// app.kubernetes.io/name: prometheus), on the port the PodMonitor scrapes.
	np := find(t, objs, "NetworkPolicy")
	rule := asList(get(np, "spec", "ingress"))[0].(obj)
	from := asList(rule["from"])[0].(obj)
	operatorPrometheusPod := obj{"app.kubernetes.io/name": "prometheus", "app.kubernetes.io/managed-by": "prometheus-operator", "prometheus": "k8s"}
	// ... in the namespace named (kubernetes.io/metadata.name is set on every
	// namespace by the API server).
	monitoringNamespace := obj{"kubernetes.io/metadata.name": "monitoring"}
	if !matches(from["podSelector"].(obj), operatorPrometheusPod) || !matches(from["namespaceSelector"].(obj), monitoringNamespace) || get(asList(rule["ports"])[0], "port") != port["containerPort"] {
		t.Errorf("the NetworkPolicy %v does not admit the operator's Prometheus pods on port %v", rule, port["containerPort"])
	}
	if !matches(get(np, "spec", "podSelector").(obj), pod) {
		t.Errorf("the NetworkPolicy selects %v, not the DaemonSet's pods", get(np, "spec", "podSelector"))
	}
}

func rules(t *testing.T, pr obj) map[string]obj {
	t.Helper()
	out := map[string]obj{}
	for _, g := range asList(get(pr, "spec", "groups")) {
		for _, r := range asList(get(g, "rules")) {
			out[get(r, "alert").(string)] = r.(obj)
		}
	}
	return out
}

func TestTemplatePrometheusRule(t *testing.T) {
	objs := render(t, "prometheusRule.enabled=true", "prometheusRule.labels.release=kube-prometheus-stack")
	prs := findAll(objs, "PrometheusRule")
	if len(prs) != 1 || len(findAll(objs, "PodMonitor")) != 0 || dashboardConfigMap(objs) != nil {
		t.Fatalf("prometheusRule alone: %d PrometheusRules, want one and nothing else", len(prs))
	}
	pr := prs[0]
	if pr["apiVersion"] != "monitoring.coreos.com/v1" || get(pr, "metadata", "namespace") != "nri-sysctl" || get(pr, "metadata", "labels", "release") != "kube-prometheus-stack" {
		t.Errorf("PrometheusRule %v %v", pr["apiVersion"], get(pr, "metadata"))
	}
	rs := rules(t, pr)
	want := map[string]string{
		"NriSysctlDown":                      `up{job="nri-sysctl"} == 0`,
		"NriSysctlAbsent":                    `absent(up{job="nri-sysctl"})`,
		"NriSysctlNotRegistered":             `nri_sysctl_registered{job="nri-sysctl"} == 0`,
		"NriSysctlPodLookupFailed":           `increase(nri_sysctl_containers_total{job="nri-sysctl", outcome=~"lookup_failed|timed_out"}[15m]) > 0`,
		"NriSysctlNamespaceWriteFailed":      `increase(nri_sysctl_containers_total{job="nri-sysctl", outcome="write_failed"}[15m]) > 0`,
		"NriSysctlConvergeFailed":            `increase(nri_sysctl_converge_keys_total{job="nri-sysctl", result="failed"}[15m]) > 0`,
		"NriSysctlContainersLackingDefaults": `nri_sysctl_containers_lacking_defaults{job="nri-sysctl"} > 0`,
		"NriSysctlConfigRejected":            `increase(nri_sysctl_config_reloads_total{job="nri-sysctl", result="failure"}[15m]) > 0`,
		"NriSysctlConfigDiffersAcrossNodes":  `count(count by (hash) (nri_sysctl_config_info{job="nri-sysctl"})) > 1`,
		"NriSysctlSlowPodLookups":            `histogram_quantile(0.99, sum by (le, namespace, pod, node) (rate(nri_sysctl_pod_lookup_duration_seconds_bucket{job="nri-sysctl"}[5m]))) > 0.5`,
	}
	if len(rs) != len(want) {
		t.Errorf("%d alerts, want %d", len(rs), len(want))
	}
	for name, expr := range want {
		r := rs[name]
		if r == nil {
			t.Errorf("no alert %s", name)
			continue
		}
		if r["expr"] != expr {
			t.Errorf("%s: expr %q, want %q", name, r["expr"], expr)
		}
		if s := get(r, "labels", "severity"); s != "critical" && s != "warning" {
			t.Errorf("%s: severity %v", name, s)
		}
		if f, _ := r["for"].(string); f == "" {
			t.Errorf("%s: no for", name)
		}
		for _, a := range []string{"summary", "description"} {
			if text, _ := get(r, "annotations", a).(string); len(text) < 20 {
				t.Errorf("%s: %s %q", name, a, text)
			}
		}
	}
	// Thresholds, durations, severities, a selector of one's own, extra
	// labels, and alerts left out.
	rs = rules(t, find(t, render(t, "prometheusRule.enabled=true", "prometheusRule.selector=job=\"pods\"\\, namespace=\"x\"",
		"prometheusRule.alerts.slowLookups.thresholdSeconds=2", "prometheusRule.alerts.lookupFailed.window=1h",
		"prometheusRule.alerts.notRegistered.for=2m", "prometheusRule.alerts.notRegistered.severity=page",
		"prometheusRule.alerts.lackingDefaults.threshold=10", "prometheusRule.alerts.down.enabled=false",
		"prometheusRule.additionalAlertLabels.team=platform"), "PrometheusRule"))
	if rs["NriSysctlDown"] != nil {
		t.Error("alerts.down.enabled=false: NriSysctlDown rendered")
	}
	for name, want := range map[string]string{
		"NriSysctlSlowPodLookups":            `> 2`,
		"NriSysctlPodLookupFailed":           `{job="pods", namespace="x", outcome=~"lookup_failed|timed_out"}[1h]`,
		"NriSysctlContainersLackingDefaults": `nri_sysctl_containers_lacking_defaults{job="pods", namespace="x"} > 10`,
	} {
		if expr, _ := rs[name]["expr"].(string); !strings.Contains(expr, want) {
			t.Errorf("%s: expr %q, want it to hold %q", name, expr, want)
		}
	}
	nr := rs["NriSysctlNotRegistered"]
	if nr["for"] != "2m" || get(nr, "labels", "severity") != "page" || get(nr, "labels", "team") != "platform" {
		t.Errorf("NriSysctlNotRegistered %v, want for 2m, severity page, team platform", nr)
	}
}

func TestTemplateGrafanaDashboard(t *testing.T) {
	objs := render(t, "grafanaDashboard.enabled=true")
	cm := dashboardConfigMap(objs)
	if cm == nil || len(findAll(objs, "PodMonitor"))+len(findAll(objs, "PrometheusRule")) != 0 {
		t.Fatalf("grafanaDashboard alone: dashboard %v, want it and no PodMonitor or PrometheusRule", cm)
	}
	if cm["apiVersion"] != "v1" || get(cm, "metadata", "labels", "grafana_dashboard") != "1" || get(cm, "metadata", "namespace") != "nri-sysctl" {
		t.Errorf("dashboard ConfigMap %v, want v1, labelled grafana_dashboard: \"1\", in nri-sysctl", get(cm, "metadata"))
	}
	text := get(cm, "data", "nri-sysctl.json").(string)
	file, err := os.ReadFile(chartDir + "/files/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(text) != strings.TrimSpace(string(file)) {
		t.Error("the ConfigMap's dashboard is not files/dashboard.json")
	}
	var d struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(text), &d); err != nil {
		t.Fatalf("the dashboard is no JSON: %v", err)
	}
	queries := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Title == "" || len(p.Targets) == 0 {
			t.Errorf("panel %q (%s): want a title and queries", p.Title, p.Type)
		}
		for _, q := range p.Targets {
			if !strings.Contains(q.Expr, "nri_sysctl_") && !strings.Contains(q.Expr, "up{") {
				t.Errorf("panel %q: query %q reads none of the plugin's series", p.Title, q.Expr)
			}
			queries++
		}
	}
	if d.UID == "" || d.Title == "" || queries < 10 {
		t.Errorf("dashboard uid %q, title %q, %d queries", d.UID, d.Title, queries)
	}
	// The sidecar's label, namespace and folder annotation are the operator's to choose.
	cm = dashboardConfigMap(render(t, "grafanaDashboard.enabled=true", "grafanaDashboard.label.key=dashboards", "grafanaDashboard.label.value=nri",
		"grafanaDashboard.namespace=monitoring", "grafanaDashboard.annotations.grafana_folder=Kubernetes"))
	labels := get(cm, "metadata", "labels").(obj)
	if labels["dashboards"] != "nri" || labels["grafana_dashboard"] != nil || get(cm, "metadata", "namespace") != "monitoring" || get(cm, "metadata", "annotations", "grafana_folder") != "Kubernetes" {
		t.Errorf("dashboard ConfigMap metadata %v", get(cm, "metadata"))
	}
}

// Each needs the metrics the plugin serves only with metrics.enabled.
func TestMonitoringNeedsMetrics(t *testing.T) {
	for _, what := range []string{"podMonitor", "prometheusRule", "grafanaDashboard"} {
		out, err := renderText(t, what+".enabled=true", "metrics.enabled=false")
		if err == nil || !strings.Contains(err.Error(), what+".enabled needs metrics.enabled") {
			t.Errorf("%s without metrics: err %v, want one saying it needs metrics.enabled\n%s", what, err, out)
		}
	}
}
