// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package alerts

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
)

// A Catalog is what Prometheus holds after scraping the plugin: each
// series name, its labels, and for each label the values it takes (nil:
// any value).
type Catalog map[string]map[string][]string

// LoadCatalog reads plugin/testdata/metrics.txt ("name type label=v1,v2
// ...", * for any value). Every scraped series, and Prometheus's own up,
// also carry targetLabels (job, instance, and what the scrape config adds).
// A histogram is its _bucket (with le), _sum and _count series.
func LoadCatalog(r io.Reader, targetLabels []string) (Catalog, error) {
	c := Catalog{}
	add := func(name string, labels map[string][]string) {
		series := map[string][]string{}
		for l, v := range labels {
			series[l] = v
		}
		for _, l := range targetLabels {
			series[l] = nil
		}
		c[name] = series
	}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			return nil, fmt.Errorf("line %d: %q: want a name, a type and labels", n, line)
		}
		name, typ := fields[0], fields[1]
		labels := map[string][]string{}
		for _, f := range fields[2:] {
			l, values, ok := strings.Cut(f, "=")
			if !ok || l == "" || values == "" {
				return nil, fmt.Errorf("line %d: %q: want label=value,value or label=*", n, f)
			}
			if values != "*" {
				labels[l] = strings.Split(values, ",")
			} else {
				labels[l] = nil
			}
		}
		switch typ {
		case "counter", "gauge", "untyped":
			add(name, labels)
		case "histogram":
			bucket := map[string][]string{"le": nil}
			for l, v := range labels {
				bucket[l] = v
			}
			add(name+"_bucket", bucket)
			add(name+"_sum", labels)
			add(name+"_count", labels)
		default:
			return nil, fmt.Errorf("line %d: metric %s: type %q is none this check knows (counter, gauge, untyped, histogram)", n, name, typ)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	// What Prometheus records for each target it scrapes.
	add("up", nil)
	return c, nil
}

// Names are the catalog's series names, sorted.
func (c Catalog) Names() []string {
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
