// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package alerts checks the Helm chart's PrometheusRule and Grafana
// dashboard against the plugin's metrics: every expression is parsed with
// Prometheus's own PromQL parser, and every metric, label and label value
// it names must be in plugin/testdata/metrics.txt, which a plugin test
// compares with the plugin's registry. A module of its own, so that
// Prometheus stays out of the plugin's go.mod.
package alerts
