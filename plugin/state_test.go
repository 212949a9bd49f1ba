// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/outcome"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/nri-sysctl/nri-sysctl/pkg/sysctl"
)

func (w *recordingWriter) write(_ podns.Target, list []sysctl.Sysctl) []podns.WriteError {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, formatApplied(list))
	var errs []podns.WriteError
	for _, s := range list {
		if w.fail[s.Key()] {
			errs = append(errs, podns.WriteError{Key: s.Key(), Value: s.Value(), Err: errors.New("invalid argument")})
		}
	}
	return errs
}

// Review finding 8: a lookup that hangs is given up before the runtime's
// deadline, and the container is created without defaults.
func TestHandlersAnswerBeforeTheDeadline(t *testing.T) {
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	p.useFetcher(blockingFetcher{})
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	deadline, _ := ctx.Deadline()
	adj, _, err := p.CreateContainer(ctx, testPod("d1", "network"), &api.Container{Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if late := time.Since(deadline); late > -20*time.Millisecond {
		t.Errorf("answered %v after the runtime's deadline (want before it, with a margin)", late)
	}
	if got := annotation(adj, outcome.AnnotationOutcome); got != outcome.LookupFailed.String() {
		t.Errorf("outcome %q, want %q", got, outcome.LookupFailed.String())
	}
}

// blockingFetcher answers only when its context ends.
type blockingFetcher struct{}

func (blockingFetcher) Fetch(ctx context.Context, _ string) (podsysctl.PodSysctls, error) {
	<-ctx.Done()
	return podsysctl.PodSysctls{}, ctx.Err()
}

// fakeRuntime is a stub's view of the runtime: the NRI version it
// reports and its request timeout.
type fakeRuntime struct {
	nri     string
	timeout time.Duration
}

func (f fakeRuntime) RuntimeNRIVersion() string     { return f.nri }
func (f fakeRuntime) RequestTimeout() time.Duration { return f.timeout }

// Every reconnection sets the stub anew while a prefetch of the
// last connection may still read it for its deadline. Run under -race
// (make unit does): a plain field would be a data race here.
func TestStubSwapDuringDeadlines(t *testing.T) {
	p := newTestPlugin(t, testConfig, &fakeFetcher{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			p.setStub(fakeRuntime{nri: "v0.12.3", timeout: time.Duration(i+1) * time.Second}, nil)
		}
	}()
	for range 200 {
		_, cancel := p.withinDeadline(context.Background())
		cancel()
	}
	<-done
	ctx, cancel := p.withinDeadline(context.Background())
	defer cancel()
	if d, ok := ctx.Deadline(); !ok || time.Until(d) < 190*time.Second {
		t.Fatalf("deadline %v after the last stub (200 s): not read from it", time.Until(d))
	}
}
