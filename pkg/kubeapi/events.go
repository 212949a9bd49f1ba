// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package kubeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sirupsen/logrus"
)

// Kubernetes Events on the plugin's own pod (--kubernetes-events), so that
// a rejected config shows where a cluster operator looks: `kubectl get
// events -n <namespace>` and `kubectl describe pod`. They are core/v1
// Events, POSTed to /api/v1/namespaces/NS/events: that is the API
// `kubectl describe` reads and the one whose legacy fields (source,
// first/lastTimestamp, count) need no reporting controller or series
// bookkeeping; events.k8s.io/v1 stores the same objects.
//
// Sending never holds up config handling or pod creation: events go
// through a small queue to one goroutine, and are dropped, with a log
// line, when the queue is full or the API server does not take them.
// Rejections come one per config edit, so there is nothing to aggregate:
// each is an Event of its own (create only, no patch).

const (
	eventComponent = "nri-sysctl"
	// eventMessageLimit is what events.k8s.io/v1 accepts for a note; the
	// core API is laxer, but a config's problem list can be long.
	eventMessageLimit = 1024
	eventQueueSize    = 16
	// eventTimeout bounds one POST; eventAttempts is how often one event
	// is tried before it is dropped.
	eventTimeout  = 10 * time.Second
	eventAttempts = 3
)

// podRef is the plugin's own pod, from the downward API.
type podRef struct {
	name, namespace, uid, node string
}

// podRefFromEnv reads POD_NAME, POD_NAMESPACE and POD_UID (and NODE_NAME,
// for the Event's source, if set).
func podRefFromEnv() (podRef, error) {
	ref := podRef{name: os.Getenv("POD_NAME"), namespace: os.Getenv("POD_NAMESPACE"), uid: os.Getenv("POD_UID"), node: os.Getenv("NODE_NAME")}
	var missing []string
	for _, v := range []struct{ env, val string }{{"POD_NAME", ref.name}, {"POD_NAMESPACE", ref.namespace}, {"POD_UID", ref.uid}} {
		if v.val == "" {
			missing = append(missing, v.env)
		}
	}
	if len(missing) > 0 {
		return ref, fmt.Errorf("--kubernetes-events: %s empty; set them from the downward API (fieldRef metadata.name, metadata.namespace, metadata.uid)", strings.Join(missing, ", "))
	}
	return ref, nil
}

type queuedEvent struct {
	eventType, reason, message string
	at                         time.Time
}

// EventRecorder sends Events about the plugin's pod.
type EventRecorder struct {
	log    *logrus.Entry
	client *Client
	pod    podRef
	queue  chan queuedEvent
	done   chan struct{}
	closed sync.Once
	// retryWait is the pause between two attempts (shortened in tests).
	retryWait time.Duration
}

// StartEvents checks, before the config is loaded, that Events can be
// sent as the pod's service account, and starts the sender. stop ends it
// after at most a few seconds spent sending what is queued, so that a
// plugin refusing to start still says why.
func StartEvents(log *logrus.Logger, userAgent string) (r *EventRecorder, stop func(), err error) {
	pod, err := podRefFromEnv()
	if err != nil {
		return nil, nil, err
	}
	c, err := New(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"), ServiceAccountDir, userAgent)
	if err != nil {
		return nil, nil, fmt.Errorf("--kubernetes-events: %w", err)
	}
	r = newEventRecorder(log.WithFields(logrus.Fields{"pod": pod.name, "namespace": pod.namespace}), c, pod)
	return r, func() { r.stop(3 * time.Second) }, nil
}

func newEventRecorder(log *logrus.Entry, c *Client, pod podRef) *EventRecorder {
	r := &EventRecorder{log: log, client: c, pod: pod, queue: make(chan queuedEvent, eventQueueSize), done: make(chan struct{}), retryWait: 2 * time.Second}
	go r.run()
	return r
}

// Warn queues a Warning Event and returns at once.
func (r *EventRecorder) Warn(reason, message string) { r.record("Warning", reason, message) }

// Normal queues a Normal Event and returns at once.
func (r *EventRecorder) Normal(reason, message string) { r.record("Normal", reason, message) }

// record queues an Event and returns at once.
func (r *EventRecorder) record(eventType, reason, message string) {
	select {
	case r.queue <- queuedEvent{eventType: eventType, reason: reason, message: message, at: time.Now()}:
	default:
		r.log.WithFields(logrus.Fields{"reason": reason, "event": message}).Warn("Kubernetes Event dropped: too many waiting to be sent")
	}
}

func (r *EventRecorder) run() {
	defer close(r.done)
	for ev := range r.queue {
		var err error
		for attempt := 1; attempt <= eventAttempts; attempt++ {
			if err = r.send(ev); err == nil || errors.Is(err, errEventRefused) {
				break
			}
			if attempt < eventAttempts {
				time.Sleep(r.retryWait)
			}
		}
		if err != nil {
			r.log.WithError(err).WithFields(logrus.Fields{"reason": ev.reason, "event": ev.message}).Warn("cannot send the Kubernetes Event")
			continue
		}
		r.log.WithField("reason", ev.reason).Debug("sent the Kubernetes Event")
	}
}

// stop sends what is queued, for at most wait; nothing may be recorded
// after it.
func (r *EventRecorder) stop(wait time.Duration) {
	r.closed.Do(func() { close(r.queue) })
	select {
	case <-r.done:
	case <-time.After(wait):
	}
}

// errEventRefused: the API server answered, and said no (RBAC, validation);
// trying again would not help.
var errEventRefused = errors.New("refused")

func (r *EventRecorder) send(ev queuedEvent) error {
	body, err := json.Marshal(eventBody(r.pod, ev))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
	defer cancel()
	_, err = r.client.Do(ctx, http.MethodPost, "/api/v1/namespaces/"+url.PathEscape(r.pod.namespace)+"/events", "application/json", body)
	var status *StatusError
	switch {
	case errors.As(err, &status) && status.Denied():
		return fmt.Errorf("%w: %w (the service account needs create on events in its namespace: see the chart's Role)", errEventRefused, err)
	case errors.As(err, &status) && status.Code >= 400 && status.Code < 500 && status.Code != http.StatusTooManyRequests:
		return fmt.Errorf("%w: %w", errEventRefused, err)
	}
	return err
}

// eventBody is the core/v1 Event about pod. Its name is the pod's and the
// time in hex, as client-go's recorder makes them: unique per event.
func eventBody(pod podRef, ev queuedEvent) map[string]any {
	ts := ev.at.UTC().Format(time.RFC3339)
	source := map[string]any{"component": eventComponent}
	if pod.node != "" {
		source["host"] = pod.node
	}
	return map[string]any{
		"apiVersion": "v1",
		"kind":       "Event",
		"metadata": map[string]any{
			"name":      fmt.Sprintf("%s.%x", pod.name, ev.at.UnixNano()),
			"namespace": pod.namespace,
		},
		"involvedObject": map[string]any{
			"apiVersion": "v1",
			"kind":       "Pod",
			"name":       pod.name,
			"namespace":  pod.namespace,
			"uid":        pod.uid,
		},
		"type":           ev.eventType,
		"reason":         ev.reason,
		"message":        truncateMessage(oneLine(ev.message), eventMessageLimit),
		"source":         source,
		"firstTimestamp": ts,
		"lastTimestamp":  ts,
		"count":          1,
	}
}

// oneLine joins a multi-line message (a config's problem list) into one,
// as `kubectl get events` shows each Event on a line.
func oneLine(s string) string {
	lines := strings.Split(s, "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, " ")
}

// truncateMessage cuts s to at most limit bytes, on a rune boundary, and
// says it was cut.
func truncateMessage(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	const more = " ... (cut; the plugin's log has all of it)"
	cut := limit - len(more)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}
