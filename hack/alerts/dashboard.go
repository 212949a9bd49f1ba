// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package alerts

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// A Query is one PromQL expression in a Grafana dashboard: a panel's
// target, or a variable's label_values(selector, label).
type Query struct {
	Where string // the panel's title and refId, or the variable
	Expr  string // as in the dashboard, Grafana's variables included
	// Label is label_values's label ("" for a panel's query).
	Label string
}

type dashboardPanel struct {
	Title   string           `json:"title"`
	Targets []dashboardQuery `json:"targets"`
	Panels  []dashboardPanel `json:"panels"` // a collapsed row's
}

type dashboardQuery struct {
	RefID string `json:"refId"`
	Expr  string `json:"expr"`
}

type dashboard struct {
	Panels     []dashboardPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

var labelValues = regexp.MustCompile(`^\s*label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

// DashboardQueries reads every query of a Grafana dashboard's JSON.
func DashboardQueries(data []byte) ([]Query, error) {
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("dashboard JSON: %w", err)
	}
	var qs []Query
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				qs = append(qs, Query{Where: fmt.Sprintf("panel %q, query %s", p.Title, t.RefID), Expr: t.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		// A variable's query is a string, or an object holding one.
		var text string
		if err := json.Unmarshal(v.Query, &text); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				return nil, fmt.Errorf("variable %s: query %s: %w", v.Name, v.Query, err)
			}
			text = obj.Query
		}
		m := labelValues.FindStringSubmatch(text)
		if m == nil {
			return nil, fmt.Errorf("variable %s: query %q: want label_values(selector, label)", v.Name, text)
		}
		qs = append(qs, Query{Where: "variable " + v.Name, Expr: m[1], Label: m[2]})
	}
	return qs, nil
}

// grafanaIntervals are Grafana's built-in range variables, which PromQL
// cannot parse as they are.
var grafanaIntervals = strings.NewReplacer(
	"${__rate_interval}", "5m", "$__rate_interval", "5m",
	"${__interval}", "1m", "$__interval", "1m",
	"${__range}", "6h", "$__range", "6h",
)

// PromQL is the query as Prometheus gets it, with a duration in place of
// Grafana's range variables; other variables ($node) stand in label
// values, where they parse as they are.
func (q Query) PromQL() string { return grafanaIntervals.Replace(q.Expr) }
