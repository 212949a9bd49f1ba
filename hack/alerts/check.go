// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package alerts

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

var promql = parser.NewParser(parser.Options{})

// Check parses expr with Prometheus's parser and returns the labels its
// result can carry, and every problem: a metric the catalog lacks, a label
// its series do not carry (in a matcher, by, without, on, ignoring,
// group_left/right, or label_replace's source), a value a label never
// takes, a histogram quantile over series without le.
func (c Catalog) Check(expr string) (map[string]bool, []string) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, []string{fmt.Sprintf("%q does not parse: %v", expr, err)}
	}
	k := &checker{catalog: c}
	out := k.labels(e)
	return out, k.problems
}

// Selectors are every vector selector in expr (nil if it does not parse).
func Selectors(expr string) []*parser.VectorSelector {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil
	}
	var vs []*parser.VectorSelector
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if s, ok := n.(*parser.VectorSelector); ok {
			vs = append(vs, s)
		}
		return nil
	})
	return vs
}

type checker struct {
	catalog  Catalog
	problems []string
}

func (k *checker) problem(format string, args ...any) {
	k.problems = append(k.problems, fmt.Sprintf(format, args...))
}

// need reports each label in want that have lacks.
func (k *checker) need(have map[string]bool, want []string, where string) {
	for _, l := range want {
		if !have[l] {
			k.problem("%s: label %q is on none of the series below (they have %v)", where, l, sorted(have))
		}
	}
}

func (k *checker) labels(e parser.Expr) map[string]bool {
	switch n := e.(type) {
	case *parser.VectorSelector:
		return k.selector(n)
	case *parser.MatrixSelector:
		return k.labels(n.VectorSelector)
	case *parser.SubqueryExpr:
		return k.labels(n.Expr)
	case *parser.ParenExpr:
		return k.labels(n.Expr)
	case *parser.UnaryExpr:
		return k.labels(n.Expr)
	case *parser.StepInvariantExpr:
		return k.labels(n.Expr)
	case *parser.AggregateExpr:
		return k.aggregate(n)
	case *parser.BinaryExpr:
		return k.binary(n)
	case *parser.Call:
		return k.call(n)
	}
	return map[string]bool{} // literals
}

func (k *checker) selector(vs *parser.VectorSelector) map[string]bool {
	name := vs.Name
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			name = m.Value
		}
	}
	series, ok := k.catalog[name]
	if !ok {
		k.problem("%s: no metric %q in the plugin's registry (known: %s)", vs, name, strings.Join(k.catalog.Names(), ", "))
		return map[string]bool{}
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel {
			continue
		}
		values, ok := series[m.Name]
		if !ok {
			k.problem("%s: %s has no label %q (it has %v)", vs, name, m.Name, sortedKeys(series))
			continue
		}
		if why := valueProblem(m, values); why != "" {
			k.problem("%s: %s", vs, why)
		}
	}
	out := map[string]bool{}
	for l := range series {
		out[l] = true
	}
	return out
}

// literalAlternation matches a regex that is only literal values: a|b|c.
var literalAlternation = regexp.MustCompile(`^[A-Za-z0-9_:.-]+(\|[A-Za-z0-9_:.-]+)*$`)

// valueProblem says why a matcher's value is never one its label takes.
// A Grafana variable ($node) is left to the dashboard.
func valueProblem(m *labels.Matcher, known []string) string {
	if known == nil || strings.Contains(m.Value, "$") || m.Value == "" {
		return ""
	}
	switch m.Type {
	case labels.MatchEqual, labels.MatchNotEqual:
		if !slices.Contains(known, m.Value) {
			return fmt.Sprintf("label %s is never %q (its values: %v)", m.Name, m.Value, known)
		}
	case labels.MatchRegexp, labels.MatchNotRegexp:
		if literalAlternation.MatchString(m.Value) {
			for _, v := range strings.Split(m.Value, "|") {
				if !slices.Contains(known, v) {
					return fmt.Sprintf("label %s is never %q, in %q (its values: %v)", m.Name, v, m.Value, known)
				}
			}
			return ""
		}
		re, err := regexp.Compile("^(?:" + m.Value + ")$")
		if err != nil {
			return fmt.Sprintf("label %s: regex %q: %v", m.Name, m.Value, err)
		}
		if !slices.ContainsFunc(known, re.MatchString) {
			return fmt.Sprintf("label %s: regex %q matches none of its values %v", m.Name, m.Value, known)
		}
	}
	return ""
}

func (k *checker) aggregate(n *parser.AggregateExpr) map[string]bool {
	in := k.labels(n.Expr)
	if n.Param != nil {
		k.labels(n.Param)
	}
	clause := "by"
	if n.Without {
		clause = "without"
	}
	k.need(in, n.Grouping, fmt.Sprintf("%s %s (%s)", n.Op, clause, strings.Join(n.Grouping, ", ")))
	switch {
	case n.Op == parser.TOPK || n.Op == parser.BOTTOMK || n.Op == parser.LIMITK || n.Op == parser.LIMIT_RATIO:
		return in
	case n.Without:
		out := maps.Clone(in)
		for _, l := range n.Grouping {
			delete(out, l)
		}
		return out
	}
	out := set(n.Grouping...)
	if n.Op == parser.COUNT_VALUES {
		if s, ok := n.Param.(*parser.StringLiteral); ok {
			out[s.Val] = true
		}
	}
	return out
}

func (k *checker) binary(n *parser.BinaryExpr) map[string]bool {
	lhs, rhs := k.labels(n.LHS), k.labels(n.RHS)
	switch {
	case n.LHS.Type() != parser.ValueTypeVector:
		return rhs
	case n.RHS.Type() != parser.ValueTypeVector:
		return lhs
	}
	vm := n.VectorMatching
	where := n.Op.String() + " " + strings.Join(vm.MatchingLabels, ", ")
	if vm.On {
		k.need(lhs, vm.MatchingLabels, where+": on the left")
		k.need(rhs, vm.MatchingLabels, where+": on the right")
	}
	switch vm.Card {
	case parser.CardManyToOne:
		k.need(rhs, vm.Include, "group_left: on the right")
		return union(lhs, set(vm.Include...))
	case parser.CardOneToMany:
		k.need(lhs, vm.Include, "group_right: on the left")
		return union(rhs, set(vm.Include...))
	case parser.CardManyToMany:
		if n.Op == parser.LOR {
			return union(lhs, rhs)
		}
		return lhs
	}
	if n.Op.IsComparisonOperator() && !n.ReturnBool {
		return lhs // a filter: the left side's series as they are
	}
	if vm.On {
		return set(vm.MatchingLabels...)
	}
	out := maps.Clone(lhs)
	for _, l := range vm.MatchingLabels {
		delete(out, l)
	}
	return out
}

func (k *checker) call(n *parser.Call) map[string]bool {
	args := make([]map[string]bool, len(n.Args))
	for i, a := range n.Args {
		args[i] = k.labels(a)
	}
	str := func(i int) string {
		if i < len(n.Args) {
			if s, ok := n.Args[i].(*parser.StringLiteral); ok {
				return s.Val
			}
		}
		return ""
	}
	switch n.Func.Name {
	case "absent", "absent_over_time":
		// absent's one series carries the equality matchers' labels.
		out := map[string]bool{}
		for _, vs := range Selectors(n.Args[0].String()) {
			for _, m := range vs.LabelMatchers {
				if m.Type == labels.MatchEqual && m.Name != model.MetricNameLabel {
					out[m.Name] = true
				}
			}
		}
		return out
	case "histogram_quantile", "histogram_fraction":
		last := args[len(args)-1]
		k.need(last, []string{"le"}, n.Func.Name+" (a classic histogram's buckets)")
		out := maps.Clone(last)
		delete(out, "le")
		return out
	case "label_replace":
		k.need(args[0], []string{str(3)}, "label_replace's source label")
		return union(args[0], set(str(1)))
	case "label_join":
		var srcs []string
		for i := 3; i < len(n.Args); i++ {
			srcs = append(srcs, str(i))
		}
		k.need(args[0], srcs, "label_join's source labels")
		return union(args[0], set(str(1)))
	}
	for i, a := range n.Args {
		if t := a.Type(); t == parser.ValueTypeVector || t == parser.ValueTypeMatrix {
			return args[i]
		}
	}
	return map[string]bool{} // vector(), time(), scalar(): no labels
}

func set(ls ...string) map[string]bool {
	out := map[string]bool{}
	for _, l := range ls {
		if l != "" {
			out[l] = true
		}
	}
	return out
}

func union(a, b map[string]bool) map[string]bool {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

func sorted(s map[string]bool) []string {
	return slices.Sorted(maps.Keys(s))
}

func sortedKeys(m map[string][]string) []string {
	return slices.Sorted(maps.Keys(m))
}
