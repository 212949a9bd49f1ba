// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/backoff"
	"github.com/sirupsen/logrus"
)

// The taint nodes register with (kubelet
// --register-with-taints=nri-sysctl.io/not-ready:NoSchedule) so that no pod
// is scheduled there before the plugin gives pods their defaults.
const (
	NotReadyTaintKey    = "nri-sysctl.io/not-ready"
	NotReadyTaintEffect = "NoSchedule"
	// NotReadyTaint is the taint as key:effect.
	NotReadyTaint = NotReadyTaintKey + ":" + NotReadyTaintEffect
)

// StartTaintRemoval checks, before anything else runs, that the plugin can
// talk to the API server as its pod's service account, and then removes
// the not-ready taint from its own node (NODE_NAME, from the downward API)
// once the plugin is registered with the runtime, synchronized and
// containerd answers its pod lookups (ready). It retries with backoff
// until the taint is gone or ctx ends.
func StartTaintRemoval(ctx context.Context, log *logrus.Logger, userAgent string, synchronized <-chan struct{}, ready Readiness) error {
	node := os.Getenv("NODE_NAME")
	if node == "" {
		return errors.New("--remove-taint: the environment variable NODE_NAME is empty; set it from the downward API (fieldRef: spec.nodeName)")
	}
	c, err := New(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"), ServiceAccountDir, userAgent)
	if err != nil {
		return fmt.Errorf("--remove-taint: %w", err)
	}
	go RunTaintRemoval(ctx, log.WithFields(logrus.Fields{"node": node, "taint": NotReadyTaint}), c, node, synchronized, ready, backoff.New(time.Second, 30*time.Second))
	return nil
}

// Readiness is what the taint removal waits for after Synchronize: Check
// asked every Interval until it says ok.
type Readiness struct {
	Check    func(context.Context) (ok bool, why string)
	Interval time.Duration
}

// wait returns once check says ok (true), or when ctx ends (false). It
// logs the reason once, and again whenever it changes.
func (r Readiness) wait(ctx context.Context, log *logrus.Entry) bool {
	logged := ""
	for {
		ok, why := r.Check(ctx)
		if ok {
			return true
		}
		if why != logged {
			log.WithField("reason", why).Warn("registered and synchronized, but pods cannot be looked up yet: the node keeps its not-ready taint")
			logged = why
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(r.Interval):
		}
	}
}

// TaintRemover is the API call RunTaintRemoval makes (a *Client).
type TaintRemover interface {
	RemoveNodeTaint(ctx context.Context, node, key, effect string) (removed bool, err error)
}

// RunTaintRemoval waits for synchronized and ready, then removes the
// not-ready taint from node through c, retrying with b until it is gone
// or ctx ends.
func RunTaintRemoval(ctx context.Context, log *logrus.Entry, c TaintRemover, node string, synchronized <-chan struct{}, ready Readiness, b *backoff.Backoff) {
	select {
	case <-synchronized:
	case <-ctx.Done():
		return
	}
	if !ready.wait(ctx, log) {
		return
	}
	for {
		removed, err := c.RemoveNodeTaint(ctx, node, NotReadyTaintKey, NotReadyTaintEffect)
		switch {
		case err == nil && removed:
			log.Info("registered, synchronized and containerd answers: removed the not-ready taint from the node")
			return
		case err == nil:
			log.Info("registered, synchronized and containerd answers: the node has no not-ready taint")
			return
		case ctx.Err() != nil:
			return
		}
		wait := b.Next()
		log.WithError(err).WithField("retry_in", wait.String()).Warn("cannot remove the not-ready taint from the node")
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
