// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package backoff

import (
	"reflect"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	b := New(500*time.Millisecond, 2*time.Second)
	var got []time.Duration
	for i := 0; i < 5; i++ {
		got = append(got, b.Next())
	}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("backoff = %v, want %v", got, want)
	}
	b.Reset()
	if d := b.Next(); d != 500*time.Millisecond {
		t.Fatalf("after reset: %v", d)
	}
}
