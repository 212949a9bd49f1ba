package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
)

// The taint nodes register with (kubelet
// --register-with-taints=nri-sysctl.io/not-ready:NoSchedule) so that no pod
// is scheduled there before the plugin gives pods their defaults.
const (
	notReadyTaintKey    = "nri-sysctl.io/not-ready"
	notReadyTaintEffect = "NoSchedule"
)

// serviceAccountDir is where a pod finds its API token and the cluster's CA.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// startTaintRemoval checks, before anything else runs, that the plugin can
// talk to the API server as its pod's service account, and then removes
// the not-ready taint from its own node (NODE_NAME, from the downward API)
// once the plugin is registered with the runtime and synchronized. It
// retries with backoff until the taint is gone or ctx ends.
func startTaintRemoval(ctx context.Context, log *logrus.Logger, synchronized <-chan struct{}) error {
	node := os.Getenv("NODE_NAME")
	if node == "" {
		return errors.New("--remove-taint: the environment variable NODE_NAME is empty; set it from the downward API (fieldRef: spec.nodeName)")
	}
	c, err := newAPIClient(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"), serviceAccountDir)
	if err != nil {
		return fmt.Errorf("--remove-taint: %w", err)
	}
	go runTaintRemoval(ctx, log.WithFields(logrus.Fields{"node": node, "taint": notReadyTaintKey + ":" + notReadyTaintEffect}), c, node, synchronized, newBackoff(time.Second, 30*time.Second))
	return nil
}

func runTaintRemoval(ctx context.Context, log *logrus.Entry, c *apiClient, node string, synchronized <-chan struct{}, b *backoff) {
	select {
	case <-synchronized:
	case <-ctx.Done():
		return
	}
	for {
		removed, err := c.removeNodeTaint(ctx, node, notReadyTaintKey, notReadyTaintEffect)
		switch {
		case err == nil && removed:
			log.Info("registered and synchronized: removed the not-ready taint from the node")
			return
		case err == nil:
			log.Info("registered and synchronized: the node has no not-ready taint")
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

// apiClient is just enough of a Kubernetes client for one node's taints:
// HTTPS to the API server, verified with the cluster's CA, as the pod's
// service account.
type apiClient struct {
	base      string // https://host:port
	tokenFile string
	http      *http.Client
}

func newAPIClient(host, port, saDir string) (*apiClient, error) {
	if host == "" || port == "" {
		return nil, errors.New("KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is empty: not running in a Kubernetes pod")
	}
	caFile := filepath.Join(saDir, "ca.crt")
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading the cluster CA: %w (is automountServiceAccountToken off?)", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", caFile)
	}
	c := &apiClient{
		base:      "https://" + net.JoinHostPort(host, port),
		tokenFile: filepath.Join(saDir, "token"),
		http: &http.Client{
			Timeout: 15 * time.Second,
			Transport: &http.Transport{
				TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
				TLSHandshakeTimeout: 10 * time.Second,
				Proxy:               nil, // in-cluster: never through a proxy
			},
		},
	}
	if _, err := c.token(); err != nil {
		return nil, err
	}
	return c, nil
}

// token is read at each request: the kubelet rotates bound tokens.
func (c *apiClient) token() (string, error) {
	data, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return "", fmt.Errorf("reading the service account token: %w", err)
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return "", fmt.Errorf("%s is empty", c.tokenFile)
	}
	return tok, nil
}

// errPatchConflict: the node changed between the read and the patch (the
// JSON patch's test failed); read it again.
var errPatchConflict = errors.New("the node's taints changed meanwhile")

// removeNodeTaint removes the taint key:effect from node. It reads the
// node, finds the taint's index, and sends a JSON patch that tests that
// the entry at that index is still exactly the taint read, and removes
// it: a taint added or removed meanwhile by someone else makes the patch
// fail rather than remove the wrong entry. removed is false when the node
// has no such taint.
func (c *apiClient) removeNodeTaint(ctx context.Context, node, key, effect string) (removed bool, err error) {
	for attempt := 0; attempt < 5; attempt++ {
		removed, err = c.removeNodeTaintOnce(ctx, node, key, effect)
		if !errors.Is(err, errPatchConflict) {
			return removed, err
		}
	}
	return false, err
}

func (c *apiClient) removeNodeTaintOnce(ctx context.Context, node, key, effect string) (bool, error) {
	path := "/api/v1/nodes/" + url.PathEscape(node)
	body, err := c.do(ctx, http.MethodGet, path, "", nil)
	if err != nil {
		return false, err
	}
	var obj struct {
		Spec struct {
			Taints []json.RawMessage `json:"taints"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(body, &obj); err != nil {
		return false, fmt.Errorf("GET %s: decoding the node: %w", path, err)
	}
	index := -1
	for i, raw := range obj.Spec.Taints {
		var t struct{ Key, Effect string }
		if err := json.Unmarshal(raw, &t); err != nil {
			return false, fmt.Errorf("GET %s: decoding taint %d: %w", path, i, err)
		}
		if t.Key == key && t.Effect == effect {
			index = i
			break
		}
	}
	if index < 0 {
		return false, nil
	}
	at := fmt.Sprintf("/spec/taints/%d", index)
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": at, "value": obj.Spec.Taints[index]},
		{"op": "remove", "path": at},
	})
	if err != nil {
		return false, err
	}
	if _, err := c.do(ctx, http.MethodPatch, path, "application/json-patch+json", patch); err != nil {
		return false, err
	}
	return true, nil
}

// do sends one request and returns the body of a 2xx answer. A failed
// JSON patch test (422) or a conflict (409) is errPatchConflict.
func (c *apiClient) do(ctx context.Context, method, path, contentType string, body []byte) ([]byte, error) {
	tok, err := c.token()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "nri-sysctl/"+version)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return data, nil
	case method == http.MethodPatch && (resp.StatusCode == http.StatusUnprocessableEntity || resp.StatusCode == http.StatusConflict):
		return nil, fmt.Errorf("%s %s: %s: %w", method, path, statusMessage(resp.Status, data), errPatchConflict)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		hint := "the service account needs get and patch on nodes: see the chart's ClusterRole"
		if strings.HasSuffix(path, "/events") {
			hint = "the service account needs create on events in its namespace: see the chart's Role"
		}
		return nil, fmt.Errorf("%s %s: %w (%s)", method, path, &apiStatusError{code: resp.StatusCode, message: statusMessage(resp.Status, data)}, hint)
	}
	return nil, fmt.Errorf("%s %s: %w", method, path, &apiStatusError{code: resp.StatusCode, message: statusMessage(resp.Status, data)})
}

// apiStatusError is an answer of the API server other than 2xx.
type apiStatusError struct {
	code    int
	message string
}

func (e *apiStatusError) Error() string { return e.message }

// statusMessage is the Status object's message when the API server sent
// one, else the HTTP status.
func statusMessage(status string, body []byte) string {
	var st struct{ Message string }
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		return status + ": " + st.Message
	}
	return status
}
