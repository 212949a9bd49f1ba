// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
)

// largeConfig has 64 defaults, 32 rules and 3 exclusions, the size the
// benchmark targets in docs/benchmarks.md are set for.
func largeConfig(tb testing.TB) *config.Config {
	var b strings.Builder
	b.WriteString("sysctls:\n")
	for i := 0; i < 64; i++ {
		fmt.Fprintf(&b, "  net.ipv4.conf.eth%d.rp_filter: %d\n", i, i%3)
	}
	b.WriteString("rules:\n")
	for i := 0; i < 32; i++ {
		fmt.Fprintf(&b, "  - name: r%d\n    match: {namespaces: [\"team-%d-*\"], labels: {tier: t%d}}\n    sysctls: {net.ipv4.conf.eth%d.rp_filter: 2, net.core.somaxconn: %d}\n", i, i%4, i%3, i, 1000+i)
	}
	b.WriteString("exclude:\n  namespaces: [kube-system]\n  runtimeHandlers: [runsc]\n  labels: {nri-sysctl: \"off\"}\n")
	cfg, err := config.Parse("large.yaml", []byte(b.String()), nil)
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

const smallConfig = `
sysctls:
  net.ipv4.tcp_keepalive_time: 600
  net.ipv4.tcp_keepalive_intvl: 60
  net.ipv4.tcp_keepalive_probes: 5
  kernel.msgmax: 16384
`

func benchInput() Input {
	return Input{
		Pod: Pod{
			Namespace: "team-1-shop", Name: "web-0",
			Labels:         map[string]string{"tier": "t1", "app": "web"},
			RuntimeHandler: "runc",
			Own:            ownNormal,
		},
		PodOwn:   map[string]string{"net.ipv4.tcp_keepalive_intvl": "33"},
		Existing: map[string]string{},
	}
}

func BenchmarkDecideSmall(b *testing.B) {
	p := Compile(mustConfig(b, smallConfig), nil)
	in := benchInput()
	b.ReportAllocs()
	for b.Loop() {
		p.Decide(in)
	}
}

func BenchmarkDecideLarge(b *testing.B) {
	p := Compile(largeConfig(b), nil)
	in := benchInput()
	if d := p.Decide(in); len(d.Apply) != 65 {
		b.Fatalf("large config applied %d keys, want 65", len(d.Apply))
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Decide(in)
	}
}

func BenchmarkDecideExcluded(b *testing.B) {
	p := Compile(largeConfig(b), nil)
	in := benchInput()
	in.Pod.Namespace = "kube-system"
	b.ReportAllocs()
	for b.Loop() {
		p.Decide(in)
	}
}

// BenchmarkDecideProfile is the large config with two profiles, one asked
// for and allowed, one not allowed: the cost a pod pays for asking.
func BenchmarkDecideProfile(b *testing.B) {
	cfg := largeConfig(b)
	extra := mustConfig(b, "profiles:\n  fast:\n    allowedNamespaces: [\"team-*\"]\n    sysctls: {net.core.somaxconn: 4096, net.ipv4.tcp_slow_start_after_idle: 0}\n  locked:\n    allowedNamespaces: [trading]\n    sysctls: {net.ipv4.tcp_fin_timeout: 5}\n")
	cfg.Profiles = extra.Profiles
	p := Compile(cfg, nil)
	in := benchInput()
	in.Pod.Annotations = map[string]string{config.ProfilesAnnotation: "fast,locked"}
	if d := p.Decide(in); len(d.Apply) != 66 || len(d.Profiles()) != 2 {
		b.Fatalf("applied %d keys and %d profiles, want 66 and 2", len(d.Apply), len(d.Profiles()))
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Decide(in)
	}
}

// BenchmarkDecideProfilesAnnotation is the large config against a profiles
// annotation of growing size, the worst a pod author can write at each: the
// cost must grow no faster than the size up to MaxProfilesAnnotationBytes
// and stay flat past it (docs/benchmarks.md). "names" fills the size with
// distinct valid names (unknown ones, each a skip), "repeats" with one
// name over and over.
func BenchmarkDecideProfilesAnnotation(b *testing.B) {
	p := Compile(largeConfig(b), nil)
	for _, size := range []int{0, 256, 1024, 16 << 10, 64 << 10, 256 << 10} {
		for _, kind := range []string{"names", "repeats"} {
			in := benchInput()
			in.Pod.Annotations = map[string]string{config.ProfilesAnnotation: worstProfiles(kind, size)}
			b.Run(fmt.Sprintf("%s/%dB", kind, size), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					p.Decide(in)
				}
			})
		}
	}
}

// worstProfiles is a profiles annotation of exactly size bytes.
func worstProfiles(kind string, size int) string {
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if kind == "names" {
			fmt.Fprintf(&b, "p%d", i)
		} else {
			b.WriteString("a")
		}
	}
	return b.String()[:size]
}

// BenchmarkDecideWorstPod sets a plain pod beside the costliest one an
// author can write within the bounds (MaxProfilesAsked distinct names of
// 63 characters, 1 KiB), for the ratio in docs/benchmarks.md.
func BenchmarkDecideWorstPod(b *testing.B) {
	p := Compile(largeConfig(b), nil)
	names := make([]string, MaxProfilesAsked)
	for i := range names {
		names[i] = fmt.Sprintf("%063d", i)
	}
	worst := benchInput()
	worst.Pod.Annotations = map[string]string{config.ProfilesAnnotation: strings.Join(names, ",")}
	if d := p.Decide(worst); len(d.Profiles()) != MaxProfilesAsked || d.ProfilesRefused() != "" {
		b.Fatalf("worst pod: %d profiles, refused %q", len(d.Profiles()), d.ProfilesRefused())
	}
	for _, c := range []struct {
		name string
		in   Input
	}{{"plain", benchInput()}, {"worst", worst}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.Decide(c.in)
			}
		})
	}
}
