// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package backoff spaces retries: each wait twice the last, up to a limit.
package backoff

import "time"

// Backoff doubles the wait after each failed attempt, up to max.
type Backoff struct {
	min, max, cur time.Duration
}

// New starts at first and doubles up to limit.
func New(first, limit time.Duration) *Backoff { return &Backoff{min: first, max: limit} }

// Reset starts again from the first wait.
func (b *Backoff) Reset() { b.cur = 0 }

// Next is the wait before the next attempt.
func (b *Backoff) Next() time.Duration {
	switch {
	case b.cur == 0:
		b.cur = b.min
	case b.cur < b.max:
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur
}
