package main

import (
	"os"
	"testing"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/probe"
)

// TestMain registers the kernel probe's re-executed helper, as main does:
// validate, explain and audit probe the kernel through this test binary.
func TestMain(m *testing.M) {
	if probe.IsHelper(os.Args) {
		os.Exit(probe.RunHelper(os.Args))
	}
	os.Exit(m.Run())
}

func mustParse(t *testing.T, text string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test config", []byte(text), nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
