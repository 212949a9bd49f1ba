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
)

// RemoveNodeTaint removes the taint key:effect from node. It reads the
// node, finds the taint's index, and sends a JSON patch that tests that
// the entry at that index is still exactly the taint read, and removes
// it: a taint added or removed meanwhile by someone else makes the patch
// fail rather than remove the wrong entry, and the node is read again.
// removed is false when the node has no such taint.
func (c *Client) RemoveNodeTaint(ctx context.Context, node, key, effect string) (removed bool, err error) {
	for attempt := 0; attempt < 5; attempt++ {
		removed, err = c.removeNodeTaintOnce(ctx, node, key, effect)
		var st *StatusError
		if !errors.As(err, &st) || !st.Conflict() {
			break
		}
	}
	var st *StatusError
	if errors.As(err, &st) && st.Denied() {
		return false, fmt.Errorf("%w (the service account needs get and patch on nodes, and the chart's node policy lets a pod's token remove only this taint from its own node: see the chart's ClusterRole and ValidatingAdmissionPolicy)", err)
	}
	return removed, err
}

func (c *Client) removeNodeTaintOnce(ctx context.Context, node, key, effect string) (bool, error) {
	path := "/api/v1/nodes/" + url.PathEscape(node)
	body, err := c.Do(ctx, http.MethodGet, path, "", nil)
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
	if _, err := c.Do(ctx, http.MethodPatch, path, "application/json-patch+json", patch); err != nil {
		return false, err
	}
	return true, nil
}
