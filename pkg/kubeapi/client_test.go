// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package kubeapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
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

// serviceAccount writes a token and srv's CA where a pod has them.
func serviceAccount(t *testing.T, srv *httptest.Server, token string) string {
	t.Helper()
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// testClient is a client of srv, as a pod with token-1; saDir is where its
// token and CA are.
func testClient(t *testing.T, srv *httptest.Server) (c *Client, saDir string) {
	t.Helper()
	saDir = serviceAccount(t, srv, "token-1")
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	c, err := New(host, port, saDir, "test")
	if err != nil {
		t.Fatal(err)
	}
	return c, saDir
}

func taint(key, effect string) map[string]any { return map[string]any{"key": key, "effect": effect} }

// The token is read at each request: the kubelet rotates it.
func TestClientRereadsToken(t *testing.T) {
	f := newFakeAPIServer(t, "node-1", taint("a", "NoSchedule"))
	c, saDir := testClient(t, f.Server)
	if _, err := c.RemoveNodeTaint(context.Background(), "node-1", NotReadyTaintKey, "NoSchedule"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(saDir, "token"), []byte("token-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RemoveNodeTaint(context.Background(), "node-1", NotReadyTaintKey, "NoSchedule"); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := []string{"Bearer token-1", "Bearer token-2"}; !reflect.DeepEqual(f.tokens, want) {
		t.Fatalf("Authorization headers %q, want %q", f.tokens, want)
	}
}

// The server must be the cluster's: a certificate from another CA fails.
func TestClientVerifiesServer(t *testing.T) {
	f := newFakeAPIServer(t, "node-1")
	saDir := serviceAccount(t, f.Server, "tok")
	writeCA(t, saDir, otherCA(t))
	host, port, _ := net.SplitHostPort(f.Listener.Addr().String())
	c, err := New(host, port, saDir, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RemoveNodeTaint(context.Background(), "node-1", NotReadyTaintKey, "NoSchedule"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("err = %v, want a certificate error", err)
	}
}

func TestNewErrors(t *testing.T) {
	f := newFakeAPIServer(t, "node-1")
	saDir := serviceAccount(t, f.Server, "tok")
	if _, err := New("", "443", saDir, "test"); err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
		t.Errorf("no host: %v", err)
	}
	if _, err := New("10.0.0.1", "443", t.TempDir(), "test"); err == nil || !strings.Contains(err.Error(), "ca.crt") {
		t.Errorf("no CA: %v", err)
	}
	if err := os.WriteFile(filepath.Join(saDir, "ca.crt"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New("10.0.0.1", "443", saDir, "test"); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("bad CA: %v", err)
	}
	saDir = serviceAccount(t, f.Server, "tok")
	os.Remove(filepath.Join(saDir, "token"))
	if _, err := New("10.0.0.1", "443", saDir, "test"); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("no token: %v", err)
	}
}

// otherCA is a CA of its own, PEM: every httptest server has the same
// certificate, which this CA did not sign.
func otherCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other CA"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// writeCA replaces saDir's ca.crt the way the kubelet updates a projected
// volume: a new file renamed over the old.
func writeCA(t *testing.T, saDir string, ca []byte) {
	t.Helper()
	tmp := filepath.Join(saDir, ".ca.crt.new")
	if err := os.WriteFile(tmp, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(saDir, "ca.crt")); err != nil {
		t.Fatal(err)
	}
}

// A CA rotation: the file on disk changes and the same Client trusts the
// new CA at its next request, and no longer the old one.
func TestClientFollowsCARotation(t *testing.T) {
	f := newFakeAPIServer(t, "node-1", taint(NotReadyTaintKey, "NoSchedule"))
	saDir := serviceAccount(t, f.Server, "tok")
	serverCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.Certificate().Raw})
	writeCA(t, saDir, otherCA(t))
	host, port, _ := net.SplitHostPort(f.Listener.Addr().String())
	c, err := New(host, port, saDir, "test")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.RemoveNodeTaint(ctx, "node-1", NotReadyTaintKey, "NoSchedule"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("before the rotation: err = %v, want a certificate error", err)
	}
	writeCA(t, saDir, serverCA)
	if removed, err := c.RemoveNodeTaint(ctx, "node-1", NotReadyTaintKey, "NoSchedule"); err != nil || !removed {
		t.Fatalf("after the CA on disk changed to the server's: removed %v, err %v", removed, err)
	}
	// Rotated away again, with the kept-alive connection gone: refused.
	writeCA(t, saDir, otherCA(t))
	f.CloseClientConnections()
	if _, err := c.RemoveNodeTaint(ctx, "node-1", NotReadyTaintKey, "NoSchedule"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("after the CA changed away from the server's: err = %v, want a certificate error", err)
	}
	// A CA file caught broken keeps the last good CA, and says so.
	if err := os.WriteFile(filepath.Join(saDir, "ca.crt"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RemoveNodeTaint(ctx, "node-1", NotReadyTaintKey, "NoSchedule"); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("with a broken CA file: err = %v, want it named", err)
	}
}

// A redirect from the API server is not followed, to another host or not.
func TestClientRefusesRedirects(t *testing.T) {
	var elsewhere sync.Mutex
	var hits []string
	target := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Lock()
		hits = append(hits, r.Header.Get("Authorization"))
		elsewhere.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"Node","metadata":{"name":"node-1"},"spec":{}}`)
	}))
	// Another host that the httptest certificate is still valid for, so
	// that a followed redirect would get there; else another port.
	if ln, err := net.Listen("tcp", "[::1]:0"); err == nil {
		target.Listener.Close()
		target.Listener = ln
	}
	target.StartTLS()
	t.Cleanup(target.Close)
	targetURL := target.URL
	redirector := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, targetURL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirector.Close)
	saDir := t.TempDir()
	writeCA(t, saDir, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: redirector.Certificate().Raw}))
	if err := os.WriteFile(filepath.Join(saDir, "token"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(redirector.Listener.Addr().String())
	c, err := New(host, port, saDir, "test")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Do(context.Background(), http.MethodGet, "/api/v1/nodes/node-1", "", nil)
	if err == nil || !errors.Is(err, errRedirect) || !strings.Contains(err.Error(), target.Listener.Addr().String()) {
		t.Fatalf("err = %v, want the redirect refused, naming where it led", err)
	}
	elsewhere.Lock()
	defer elsewhere.Unlock()
	if len(hits) > 0 {
		t.Fatalf("the redirect was followed: the other host got %d requests", len(hits))
	}
}
