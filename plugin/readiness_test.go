package plugin

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	versionapi "github.com/containerd/containerd/api/services/version/v1"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

// fakeContainerdVersion answers containerd's Version call, all a readiness
// check asks.
type fakeContainerdVersion struct {
	versionapi.UnimplementedVersionServer
}

func (fakeContainerdVersion) Version(context.Context, *emptypb.Empty) (*versionapi.VersionResponse, error) {
	return &versionapi.VersionResponse{Version: "v2.4.2"}, nil
}

// shortSocketDir is a temporary directory short enough for a unix socket
// path (t.TempDir's can pass the 108-byte limit).
func shortSocketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nrisc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serveFakeContainerd serves containerd's Version API on path until the
// test ends.
func serveFakeContainerd(t *testing.T, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	versionapi.RegisterVersionServer(srv, fakeContainerdVersion{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() { srv.Stop(); <-done })
}

// A plugin registered and synchronized whose containerd does not answer is
// not ready: /healthz says 503 naming containerd, and the node keeps its
// taint. Once containerd answers, both follow.
func TestReadinessWaitsForContainerd(t *testing.T) {
	sock := filepath.Join(shortSocketDir(t), "containerd.sock")
	log := logrus.New()
	log.SetOutput(io.Discard)
	p := newPlugin(log, nil, "")
	p.metricsListener.flag = "127.0.0.1:0"
	t.Cleanup(p.metricsListener.close)
	conns := newLookups(log, ContainerdFlags{Address: sock, AddressSet: true, Namespace: "k8s.io"}, 0)
	t.Cleanup(conns.Close)
	p.connect = conns.connect
	if err := p.applyConfig(mustParse(t, testConfig)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Configure(context.Background(), "", "containerd", "2.4.2"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Synchronize(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}

	f := &fakeTaintRemover{tainted: true}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var logs syncBuffer
	tlog := logrus.New()
	tlog.SetOutput(&logs)
	go func() {
		defer close(done)
		runTaintRemoval(ctx, logrus.NewEntry(tlog), f, "node-1", p.synchronized, readiness{check: p.lookupReady, interval: 20 * time.Millisecond}, newBackoff(10*time.Millisecond, 20*time.Millisecond))
	}()
	t.Cleanup(func() { cancel(); <-done })

	url := "http://" + p.metricsListener.bound + "/healthz"
	code, body := get(t, url)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "containerd") || !strings.Contains(body, sock) {
		t.Fatalf("/healthz with containerd away: %d %q, want 503 naming containerd at %s", code, body, sock)
	}
	time.Sleep(200 * time.Millisecond)
	if calls, tainted := f.state(); calls != 0 || !tainted {
		t.Fatalf("the API server was asked %d times (tainted %v) while containerd does not answer", calls, tainted)
	}
	if !strings.Contains(logs.String(), "keeps its not-ready taint") {
		t.Errorf("the wait is not logged: %s", logs.String())
	}

	serveFakeContainerd(t, sock)
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body = get(t, url)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz once containerd answers: %d %q", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the taint was not removed once containerd answers")
	}
	if _, tainted := f.state(); tainted {
		t.Fatal("the taint is left")
	}
}

// A pre-installed plugin's discovered lookup is ready once one of the
// parent's sockets answers, before any pod was looked up; while none
// does, the reason names each one.
func TestDiscoveredLookupAnswers(t *testing.T) {
	dir := shortSocketDir(t)
	ttrpc, grpcSock := filepath.Join(dir, "a.sock.ttrpc"), filepath.Join(dir, "b.sock")
	log := logrus.New()
	log.SetOutput(io.Discard)
	l := newLookups(log, ContainerdFlags{}, 0)
	t.Cleanup(l.Close)
	d := &discoveredLookup{lookups: l, namespace: "k8s.io", candidates: []containerdTarget{{address: ttrpc, namespace: "k8s.io"}, {address: grpcSock, namespace: "k8s.io"}}}
	ok, why := d.answers(context.Background())
	if ok || !strings.Contains(why, ttrpc) || !strings.Contains(why, grpcSock) {
		t.Fatalf("no socket served: answers %v %q, want false naming both", ok, why)
	}
	serveFakeContainerd(t, grpcSock)
	waitForLong(t, "the served candidate to answer", func() bool {
		ok, _ := d.answers(context.Background())
		return ok
	})
}

// waitForLong is waitFor with room for gRPC's reconnect backoff.
func waitForLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
