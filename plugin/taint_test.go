package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// fakeAPIServer serves GET and JSON-patch PATCH of one node, enough to
// check what the plugin sends, with the API server's answers.
type fakeAPIServer struct {
	*httptest.Server
	t       *testing.T
	node    string
	mu      sync.Mutex
	taints  []any
	tokens  []string // Authorization of each request
	gets    int
	patches int
	status  int               // answer every request with this status when set
	onPatch func([]any) []any // changes the taints just before a PATCH applies (a racing writer)
}

func newFakeAPIServer(t *testing.T, node string, taints ...map[string]any) *fakeAPIServer {
	f := &fakeAPIServer{t: t, node: node}
	for _, tt := range taints {
		f.taints = append(f.taints, tt)
	}
	f.Server = httptest.NewTLSServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAPIServer) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokens = append(f.tokens, r.Header.Get("Authorization"))
	w.Header().Set("Content-Type", "application/json")
	if f.status != 0 {
		w.WriteHeader(f.status)
		json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "message": `nodes "` + f.node + `" is forbidden: User "system:serviceaccount:x:y" cannot patch resource "nodes"`})
		return
	}
	if r.URL.Path != "/api/v1/nodes/"+f.node {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	switch r.Method {
	case http.MethodGet:
		f.gets++
		json.NewEncoder(w).Encode(map[string]any{"kind": "Node", "metadata": map[string]any{"name": f.node}, "spec": map[string]any{"taints": f.taints}})
	case http.MethodPatch:
		f.patches++
		if ct := r.Header.Get("Content-Type"); ct != "application/json-patch+json" {
			f.t.Errorf("PATCH Content-Type %q, want application/json-patch+json", ct)
		}
		if f.onPatch != nil {
			f.taints = f.onPatch(f.taints)
			f.onPatch = nil
		}
		body, _ := io.ReadAll(r.Body)
		var ops []struct {
			Op    string
			Path  string
			Value any
		}
		if err := json.Unmarshal(body, &ops); err != nil {
			f.t.Errorf("PATCH body %s: %v", body, err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		taints := append([]any(nil), f.taints...)
		for _, op := range ops {
			var i int
			if _, err := fmtSscan(op.Path, &i); err != nil || i >= len(taints) {
				w.WriteHeader(http.StatusUnprocessableEntity)
				return
			}
			switch op.Op {
			case "test":
				if !reflect.DeepEqual(taints[i], op.Value) {
					w.WriteHeader(http.StatusUnprocessableEntity)
					json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "message": "the server rejected our request due to an error in our request"})
					return
				}
			case "remove":
				taints = append(taints[:i], taints[i+1:]...)
			default:
				f.t.Errorf("unexpected op %q", op.Op)
			}
		}
		f.taints = taints
		json.NewEncoder(w).Encode(map[string]any{"kind": "Node"})
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

func fmtSscan(path string, i *int) (int, error) {
	rest, ok := strings.CutPrefix(path, "/spec/taints/")
	if !ok {
		return 0, os.ErrInvalid
	}
	return 1, json.Unmarshal([]byte(rest), i)
}

func (f *fakeAPIServer) state() (taints []any, gets, patches int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]any(nil), f.taints...), f.gets, f.patches
}

// serviceAccount writes a token and the server's CA where a pod has them.
func serviceAccount(t *testing.T, f *fakeAPIServer, token string) string {
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func testClient(t *testing.T, f *fakeAPIServer) (*apiClient, string) {
	t.Helper()
	saDir := serviceAccount(t, f, "token-1")
	host, port, _ := net.SplitHostPort(f.Listener.Addr().String())
	c, err := newAPIClient(host, port, saDir)
	if err != nil {
		t.Fatal(err)
	}
	return c, saDir
}

func taint(key, effect string) map[string]any { return map[string]any{"key": key, "effect": effect} }

func TestRemoveNodeTaintRemovesOnlyThatTaint(t *testing.T) {
	other := taint("dedicated", "NoSchedule")
	sameKeyOtherEffect := taint(notReadyTaintKey, "NoExecute")
	f := newFakeAPIServer(t, "node-1", other, taint(notReadyTaintKey, "NoSchedule"), sameKeyOtherEffect)
	c, _ := testClient(t, f)
	removed, err := c.removeNodeTaint(context.Background(), "node-1", notReadyTaintKey, notReadyTaintEffect)
	if err != nil || !removed {
		t.Fatalf("removeNodeTaint = %v, %v; want true, nil", removed, err)
	}
	got, _, patches := f.state()
	want := []any{map[string]any{"key": "dedicated", "effect": "NoSchedule"}, map[string]any{"key": notReadyTaintKey, "effect": "NoExecute"}}
	if !reflect.DeepEqual(got, want) || patches != 1 {
		t.Fatalf("taints after removal %v (%d patches), want %v", got, patches, want)
	}
}

// Another writer changes the taints between the read and the patch: the
// patch's test fails, and the plugin reads again instead of removing the
// entry now at that index.
func TestRemoveNodeTaintRace(t *testing.T) {
	f := newFakeAPIServer(t, "node-1", taint("a", "NoSchedule"), taint(notReadyTaintKey, "NoSchedule"))
	f.onPatch = func(taints []any) []any {
		return append([]any{taint("inserted", "NoSchedule")}, taints...)
	}
	c, _ := testClient(t, f)
	removed, err := c.removeNodeTaint(context.Background(), "node-1", notReadyTaintKey, notReadyTaintEffect)
	if err != nil || !removed {
		t.Fatalf("removeNodeTaint = %v, %v", removed, err)
	}
	got, gets, patches := f.state()
	want := []any{map[string]any{"key": "inserted", "effect": "NoSchedule"}, map[string]any{"key": "a", "effect": "NoSchedule"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("taints %v, want %v", got, want)
	}
	if gets != 2 || patches != 2 {
		t.Fatalf("%d GETs and %d PATCHes, want 2 and 2 (read again after the failed test)", gets, patches)
	}
}

func TestRemoveNodeTaintAbsent(t *testing.T) {
	f := newFakeAPIServer(t, "node-1", taint("a", "NoSchedule"))
	c, _ := testClient(t, f)
	removed, err := c.removeNodeTaint(context.Background(), "node-1", notReadyTaintKey, notReadyTaintEffect)
	if err != nil || removed {
		t.Fatalf("removeNodeTaint = %v, %v; want false, nil", removed, err)
	}
	if _, _, patches := f.state(); patches != 0 {
		t.Fatalf("%d PATCHes for a node without the taint", patches)
	}
}

func TestRemoveNodeTaintForbidden(t *testing.T) {
	f := newFakeAPIServer(t, "node-1", taint(notReadyTaintKey, "NoSchedule"))
	f.status = http.StatusForbidden
	c, _ := testClient(t, f)
	_, err := c.removeNodeTaint(context.Background(), "node-1", notReadyTaintKey, notReadyTaintEffect)
	if err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "get and patch on nodes") || !strings.Contains(err.Error(), "cannot patch resource") {
		t.Fatalf("err = %v; want the status, the API server's message and the RBAC hint", err)
	}
}

// The token is read at each request: the kubelet rotates it.
func TestAPIClientRereadsToken(t *testing.T) {
	f := newFakeAPIServer(t, "node-1", taint("a", "NoSchedule"))
	c, saDir := testClient(t, f)
	if _, err := c.removeNodeTaint(context.Background(), "node-1", notReadyTaintKey, notReadyTaintEffect); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(saDir, "token"), []byte("token-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.removeNodeTaint(context.Background(), "node-1", notReadyTaintKey, notReadyTaintEffect); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := []string{"Bearer token-1", "Bearer token-2"}; !reflect.DeepEqual(f.tokens, want) {
		t.Fatalf("Authorization headers %q, want %q", f.tokens, want)
	}
}

// The server must be the cluster's: a certificate from another CA fails.
func TestAPIClientVerifiesServer(t *testing.T) {
	f := newFakeAPIServer(t, "node-1")
	saDir := serviceAccount(t, f, "tok")
	// A CA of its own: every httptest server has the same certificate.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other CA"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(saDir, "ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(f.Listener.Addr().String())
	c, err := newAPIClient(host, port, saDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.removeNodeTaint(context.Background(), "node-1", notReadyTaintKey, notReadyTaintEffect); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("err = %v, want a certificate error", err)
	}
}

func TestNewAPIClientErrors(t *testing.T) {
	f := newFakeAPIServer(t, "node-1")
	saDir := serviceAccount(t, f, "tok")
	if _, err := newAPIClient("", "443", saDir); err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
		t.Errorf("no host: %v", err)
	}
	if _, err := newAPIClient("10.0.0.1", "443", t.TempDir()); err == nil || !strings.Contains(err.Error(), "ca.crt") {
		t.Errorf("no CA: %v", err)
	}
	if err := os.WriteFile(filepath.Join(saDir, "ca.crt"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := newAPIClient("10.0.0.1", "443", saDir); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("bad CA: %v", err)
	}
	saDir = serviceAccount(t, f, "tok")
	os.Remove(filepath.Join(saDir, "token"))
	if _, err := newAPIClient("10.0.0.1", "443", saDir); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("no token: %v", err)
	}
}

func TestStartTaintRemovalNeedsNodeName(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	err := startTaintRemoval(context.Background(), logrus.New(), make(chan struct{}))
	if err == nil || !strings.Contains(err.Error(), "NODE_NAME") || !strings.Contains(err.Error(), "spec.nodeName") {
		t.Fatalf("err = %v", err)
	}
	t.Setenv("NODE_NAME", "n")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if err := startTaintRemoval(context.Background(), logrus.New(), make(chan struct{})); err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
		t.Fatalf("err = %v", err)
	}
}

// Nothing is sent before the first Synchronize; then the taint goes, and a
// failing API server is retried.
func TestRunTaintRemovalWaitsForSynchronized(t *testing.T) {
	f := newFakeAPIServer(t, "node-1", taint(notReadyTaintKey, "NoSchedule"))
	f.status = http.StatusServiceUnavailable
	c, _ := testClient(t, f)
	synced := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var logs syncBuffer
	log := logrus.New()
	log.SetOutput(&logs)
	go func() {
		defer close(done)
		runTaintRemoval(ctx, logrus.NewEntry(log), c, "node-1", synced, newBackoff(10*time.Millisecond, 20*time.Millisecond))
	}()
	t.Cleanup(func() { cancel(); <-done })
	time.Sleep(100 * time.Millisecond)
	if _, gets, _ := f.state(); gets != 0 || len(f.tokens) != 0 {
		t.Fatalf("requests before the first Synchronize")
	}
	close(synced)
	waitFor(t, "a failed attempt", func() bool { return strings.Contains(logs.String(), "503") })
	f.mu.Lock()
	f.status = 0
	f.mu.Unlock()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("taint removal did not finish")
	}
	if got, _, _ := f.state(); len(got) != 0 {
		t.Fatalf("taints left: %v", got)
	}
	if !strings.Contains(logs.String(), "removed the not-ready taint") {
		t.Fatalf("log: %s", logs.String())
	}
}
