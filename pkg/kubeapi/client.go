// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

// Package kubeapi is just enough of a Kubernetes API client for a pod that
// talks to its own cluster: HTTPS to the API server, verified with the
// cluster's CA, as the pod's service account. Callers build the request
// paths and bodies; Do sends one request.
package kubeapi

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
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// ServiceAccountDir is where a pod finds its API token and the cluster's CA.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Client sends requests to one API server.
type Client struct {
	base      string // https://host:port
	tokenFile string
	caFile    string
	userAgent string

	mu sync.Mutex
	// ca is the CA text http trusts; http is rebuilt when the file's
	// text changes (the kubelet rewrites the projected ca.crt on a CA
	// rotation).
	ca   []byte
	http *http.Client
}

// New makes a client for the API server at host:port (a pod's
// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT) with the CA and
// token in saDir. It fails at once when the CA or the token cannot be read.
func New(host, port, saDir, userAgent string) (*Client, error) {
	if host == "" || port == "" {
		return nil, errors.New("KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is empty: not running in a Kubernetes pod")
	}
	c := &Client{
		base:      "https://" + net.JoinHostPort(host, port),
		tokenFile: filepath.Join(saDir, "token"),
		caFile:    filepath.Join(saDir, "ca.crt"),
		userAgent: userAgent,
	}
	ca, err := os.ReadFile(c.caFile)
	if err != nil {
		return nil, fmt.Errorf("reading the cluster CA: %w (is automountServiceAccountToken off?)", err)
	}
	if c.http, err = newHTTPClient(c.caFile, ca); err != nil {
		return nil, err
	}
	c.ca = ca
	if _, err := c.token(); err != nil {
		return nil, err
	}
	return c, nil
}

// errRedirect: the API server answers requests itself; a redirect could
// only send the token, or the plugin's trust, somewhere else.
var errRedirect = errors.New("refusing to follow a redirect from the API server")

func newHTTPClient(caFile string, ca []byte) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", caFile)
	}
	return &http.Client{
		Timeout: 15 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout: 10 * time.Second,
			Proxy:               nil, // in-cluster: never through a proxy
		},
		CheckRedirect: func(req *http.Request, _ []*http.Request) error {
			return fmt.Errorf("%w (to %s)", errRedirect, req.URL.Redacted())
		},
	}, nil
}

// httpClient returns the HTTP client for the CA the file holds now. The
// file is read at each request, as the token is: a few KiB, and requests
// are rare. A file that cannot be read or parsed (caught mid-rotation)
// leaves the last good CA in force; its problem is returned so that a
// failing request can tell of it.
func (c *Client) httpClient() (*http.Client, error) {
	ca, err := os.ReadFile(c.caFile)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		return c.http, fmt.Errorf("re-reading the cluster CA: %w", err)
	}
	if bytes.Equal(ca, c.ca) {
		return c.http, nil
	}
	next, err := newHTTPClient(c.caFile, ca)
	if err != nil {
		return c.http, err
	}
	// Connections made under the old CA go: the next request verifies
	// the server against the new one.
	c.http.CloseIdleConnections()
	c.http, c.ca = next, ca
	return next, nil
}

// token is read at each request: the kubelet rotates bound tokens.
func (c *Client) token() (string, error) {
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

// StatusError is an answer outside 2xx, with the API server's message.
type StatusError struct {
	Method, Path string
	Code         int
	// Status is the HTTP status line's text ("403 Forbidden").
	Status string
	// Message is the API server's Status message, if it sent one.
	Message string
}

func (e *StatusError) Error() string {
	if e.Message != "" {
		return fmt.Sprintf("%s %s: %s: %s", e.Method, e.Path, e.Status, e.Message)
	}
	return fmt.Sprintf("%s %s: %s", e.Method, e.Path, e.Status)
}

// Conflict tells an answer that says the object changed meanwhile: a
// conflict (409), or a JSON patch whose test failed (422).
func (e *StatusError) Conflict() bool {
	return e.Code == http.StatusConflict || e.Code == http.StatusUnprocessableEntity
}

// Denied tells an answer that says the service account may not do this.
func (e *StatusError) Denied() bool {
	return e.Code == http.StatusUnauthorized || e.Code == http.StatusForbidden
}

// Do sends one request, path from the API's root ("/api/v1/..."), and
// returns the body of a 2xx answer; any other answer is a *StatusError.
// contentType may be empty for a request without a body.
func (c *Client) Do(ctx context.Context, method, path, contentType string, body []byte) ([]byte, error) {
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
	req.Header.Set("User-Agent", c.userAgent)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	hc, caErr := c.httpClient()
	resp, err := hc.Do(req)
	if err != nil {
		if caErr != nil {
			err = fmt.Errorf("%w (with the last good CA: %w)", err, caErr)
		}
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return data, nil
	}
	var st struct{ Message string }
	_ = json.Unmarshal(data, &st)
	return nil, &StatusError{Method: method, Path: path, Code: resp.StatusCode, Status: resp.Status, Message: st.Message}
}
