// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package kubeapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// fakeEventsServer takes POSTs of Events as the API server does, and keeps
// what it was sent.
type fakeEventsServer struct {
	*httptest.Server
	mu     sync.Mutex
	posts  []postedEvent
	status int           // answer with this status when set
	hold   chan struct{} // when set, each request waits for it to close
}

type postedEvent struct {
	path, auth, contentType string
	body                    map[string]any
}

func newFakeEventsServer(t *testing.T) *fakeEventsServer {
	f := &fakeEventsServer{}
	f.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		hold := f.hold
		f.mu.Unlock()
		if hold != nil {
			<-hold
		}
		data, _ := io.ReadAll(r.Body)
		var body map[string]any
		if err := json.Unmarshal(data, &body); err != nil {
			t.Errorf("POST body %q: %v", data, err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if r.Method != http.MethodPost {
			t.Errorf("%s %s, want POST", r.Method, r.URL.Path)
		}
		f.posts = append(f.posts, postedEvent{path: r.URL.Path, auth: r.Header.Get("Authorization"), contentType: r.Header.Get("Content-Type"), body: body})
		w.Header().Set("Content-Type", "application/json")
		if f.status != 0 {
			w.WriteHeader(f.status)
			json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "message": `events is forbidden: User "system:serviceaccount:nri-sysctl:nri-sysctl" cannot create resource "events"`})
			return
		}
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(body)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeEventsServer) received() []postedEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]postedEvent(nil), f.posts...)
}

var testPodRef = podRef{name: "nri-sysctl-x7k2p", namespace: "nri-sysctl", uid: "0b7c9a3e-1f2d-4c5b-9a8e-7d6c5b4a3f21", node: "node-1"}

// testRecorder sends to f as the pod testPodRef; the hook has its log.
func testRecorder(t *testing.T, f *fakeEventsServer) (*EventRecorder, *logtest.Hook) {
	t.Helper()
	c, _ := testClient(t, f.Server)
	log := logrus.New()
	log.SetOutput(io.Discard)
	hook := logtest.NewLocal(log)
	r := newEventRecorder(log.WithField("pod", testPodRef.name), c, testPodRef)
	r.retryWait = 10 * time.Millisecond
	t.Cleanup(func() { r.stop(5 * time.Second) })
	return r, hook
}

// logged is every line of hook's log, with its error, one per line.
func logged(hook *logtest.Hook) string {
	var b strings.Builder
	for _, e := range hook.AllEntries() {
		fmt.Fprintf(&b, "%s %v\n", e.Message, e.Data[logrus.ErrorKey])
	}
	return b.String()
}

func waitPosts(t *testing.T, f *fakeEventsServer, n int) []postedEvent {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(f.received()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d Event(s) reached the API server, want %d", len(f.received()), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return f.received()
}

func TestEventBodyNamesThePluginsPod(t *testing.T) {
	at := time.Date(2026, 12, 1, 20, 15, 0, 123, time.UTC)
	got := eventBody(testPodRef, queuedEvent{eventType: "Warning", reason: "ConfigRejected", message: "reload rejected: x", at: at})
	data, _ := json.Marshal(got)
	var ev struct {
		APIVersion, Kind string
		Metadata         struct{ Name, Namespace string }
		InvolvedObject   struct{ APIVersion, Kind, Name, Namespace, UID string }
		Type, Reason     string
		Message          string
		Source           struct{ Component, Host string }
		FirstTimestamp   string
		LastTimestamp    string
		Count            int
	}
	if err := json.Unmarshal(data, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.APIVersion != "v1" || ev.Kind != "Event" {
		t.Errorf("apiVersion %q kind %q, want v1 Event", ev.APIVersion, ev.Kind)
	}
	if ev.Metadata.Namespace != testPodRef.namespace || !strings.HasPrefix(ev.Metadata.Name, testPodRef.name+".") {
		t.Errorf("metadata %+v: want the pod's namespace and a name of the pod's name and a suffix", ev.Metadata)
	}
	if o := ev.InvolvedObject; o.APIVersion != "v1" || o.Kind != "Pod" || o.Name != testPodRef.name || o.Namespace != testPodRef.namespace || o.UID != testPodRef.uid {
		t.Errorf("involvedObject %+v, want the plugin's pod %+v", o, testPodRef)
	}
	if ev.Type != "Warning" || ev.Reason != "ConfigRejected" || ev.Message != "reload rejected: x" {
		t.Errorf("type %q reason %q message %q", ev.Type, ev.Reason, ev.Message)
	}
	if ev.Source.Component != "nri-sysctl" || ev.Source.Host != "node-1" {
		t.Errorf("source %+v", ev.Source)
	}
	if ev.FirstTimestamp != "2026-12-01T20:15:00Z" || ev.LastTimestamp != ev.FirstTimestamp || ev.Count != 1 {
		t.Errorf("timestamps %q %q count %d", ev.FirstTimestamp, ev.LastTimestamp, ev.Count)
	}
	// Two events a nanosecond apart get two names.
	other := eventBody(testPodRef, queuedEvent{at: at.Add(time.Nanosecond)})
	if other["metadata"].(map[string]any)["name"] == got["metadata"].(map[string]any)["name"] {
		t.Error("two Events got the same name")
	}
}

func TestEventMessageCutToTheLimit(t *testing.T) {
	long := strings.Repeat("é", 1000) // 2000 bytes
	got := truncateMessage(long, eventMessageLimit)
	if len(got) > eventMessageLimit || !strings.HasSuffix(got, "(cut; the plugin's log has all of it)") {
		t.Fatalf("%d bytes, ends %q", len(got), got[max(0, len(got)-50):])
	}
	if !strings.HasPrefix(got, "éé") || strings.ContainsRune(got, '\uFFFD') {
		t.Error("cut inside a character")
	}
	if short := "reload rejected: x"; truncateMessage(short, eventMessageLimit) != short {
		t.Error("a short message was changed")
	}
}

func TestEventsPostedAsTheServiceAccount(t *testing.T) {
	f := newFakeEventsServer(t)
	r, _ := testRecorder(t, f)
	r.Warn("ConfigRejected", "reload rejected: a")
	r.Normal("ConfigReloaded", "config reloaded")
	posts := waitPosts(t, f, 2)
	for _, p := range posts {
		if p.path != "/api/v1/namespaces/nri-sysctl/events" || p.auth != "Bearer token-1" || p.contentType != "application/json" {
			t.Errorf("POST %s auth %q content type %q", p.path, p.auth, p.contentType)
		}
	}
	if posts[0].body["reason"] != "ConfigRejected" || posts[0].body["type"] != "Warning" || posts[1].body["type"] != "Normal" {
		t.Errorf("bodies %v / %v", posts[0].body, posts[1].body)
	}
}

// A hung API server holds up neither the caller nor anything else: record
// returns at once, and what does not fit in the queue is dropped and
// logged.
func TestEventsNeverBlock(t *testing.T) {
	f := newFakeEventsServer(t)
	f.hold = make(chan struct{})
	r, hook := testRecorder(t, f)
	start := time.Now()
	for i := 0; i < 3*eventQueueSize; i++ {
		r.Warn("ConfigRejected", "reload rejected")
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("recording %d Events took %s with the API server hung", 3*eventQueueSize, took)
	}
	if !strings.Contains(logged(hook), "Kubernetes Event dropped") {
		t.Errorf("no log line for the dropped Events:\n%s", logged(hook))
	}
	close(f.hold)
	// The queue held eventQueueSize; one more was being sent if the
	// sender took it before the queue filled (under load it may not).
	waitPosts(t, f, eventQueueSize)
	r.stop(5 * time.Second)
	if n := len(f.received()); n > eventQueueSize+1 {
		t.Errorf("%d Events sent, want at most %d (the rest dropped)", n, eventQueueSize+1)
	}
}

// A refusal (RBAC) is logged and not tried again; a server error is
// tried eventAttempts times.
func TestEventsFailures(t *testing.T) {
	for _, tc := range []struct {
		status, attempts int
		log              string
	}{
		{http.StatusForbidden, 1, "needs create on events in its namespace"},
		{http.StatusInternalServerError, eventAttempts, "cannot send the Kubernetes Event"},
	} {
		f := newFakeEventsServer(t)
		f.status = tc.status
		r, hook := testRecorder(t, f)
		r.Warn("ConfigRejected", "reload rejected: b")
		r.stop(5 * time.Second)
		if n := len(f.received()); n != tc.attempts {
			t.Errorf("HTTP %d: %d attempts, want %d", tc.status, n, tc.attempts)
		}
		if !strings.Contains(logged(hook), "cannot send the Kubernetes Event") || !strings.Contains(logged(hook), tc.log) {
			t.Errorf("HTTP %d: log lacks %q:\n%s", tc.status, tc.log, logged(hook))
		}
	}
}

func TestPodRefFromEnv(t *testing.T) {
	t.Setenv("POD_NAME", "p")
	t.Setenv("POD_NAMESPACE", "")
	t.Setenv("POD_UID", "")
	_, err := podRefFromEnv()
	if err == nil || !strings.Contains(err.Error(), "POD_NAMESPACE, POD_UID empty") || !strings.Contains(err.Error(), "downward API") {
		t.Fatalf("err %v, want one naming POD_NAMESPACE and POD_UID and the downward API", err)
	}
	t.Setenv("POD_NAMESPACE", "ns")
	t.Setenv("POD_UID", "u")
	t.Setenv("NODE_NAME", "n")
	if ref, err := podRefFromEnv(); err != nil || ref != (podRef{name: "p", namespace: "ns", uid: "u", node: "n"}) {
		t.Fatalf("%+v, %v", ref, err)
	}
}
