package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/kubeapi"
	"github.com/sirupsen/logrus"
)

// The taint nodes register with (kubelet
// --register-with-taints=nri-sysctl.io/not-ready:NoSchedule) so that no pod
// is scheduled there before the plugin gives pods their defaults.
const (
	notReadyTaintKey    = "nri-sysctl.io/not-ready"
	notReadyTaintEffect = "NoSchedule"
)

// startTaintRemoval checks, before anything else runs, that the plugin can
// talk to the API server as its pod's service account, and then removes
// the not-ready taint from its own node (NODE_NAME, from the downward API)
// once the plugin is registered with the runtime, synchronized and
// containerd answers its pod lookups (ready). It retries with backoff
// until the taint is gone or ctx ends.
func startTaintRemoval(ctx context.Context, log *logrus.Logger, userAgent string, synchronized <-chan struct{}, ready readiness) error {
	node := os.Getenv("NODE_NAME")
	if node == "" {
		return errors.New("--remove-taint: the environment variable NODE_NAME is empty; set it from the downward API (fieldRef: spec.nodeName)")
	}
	c, err := kubeapi.New(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"), kubeapi.ServiceAccountDir, userAgent)
	if err != nil {
		return fmt.Errorf("--remove-taint: %w", err)
	}
	go runTaintRemoval(ctx, log.WithFields(logrus.Fields{"node": node, "taint": notReadyTaintKey + ":" + notReadyTaintEffect}), c, node, synchronized, ready, newBackoff(time.Second, 30*time.Second))
	return nil
}

// readiness is what the taint removal waits for after Synchronize: check
// asked every interval until it says ok.
type readiness struct {
	check    func(context.Context) (ok bool, why string)
	interval time.Duration
}

// wait returns once check says ok (true), or when ctx ends (false). It
// logs the reason once, and again whenever it changes.
func (r readiness) wait(ctx context.Context, log *logrus.Entry) bool {
	logged := ""
	for {
		ok, why := r.check(ctx)
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
		case <-time.After(r.interval):
		}
	}
}

// taintRemover is the API call runTaintRemoval makes (a *kubeapi.Client).
type taintRemover interface {
	RemoveNodeTaint(ctx context.Context, node, key, effect string) (removed bool, err error)
}

func runTaintRemoval(ctx context.Context, log *logrus.Entry, c taintRemover, node string, synchronized <-chan struct{}, ready readiness, b *backoff) {
	select {
	case <-synchronized:
	case <-ctx.Done():
		return
	}
	if !ready.wait(ctx, log) {
		return
	}
	for {
		removed, err := c.RemoveNodeTaint(ctx, node, notReadyTaintKey, notReadyTaintEffect)
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
		wait := b.next()
		log.WithError(err).WithField("retry_in", wait.String()).Warn("cannot remove the not-ready taint from the node")
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
