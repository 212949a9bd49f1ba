// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package kubeapi

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

func TestRemoveNodeTaintRemovesOnlyThatTaint(t *testing.T) {
	other := taint("dedicated", "NoSchedule")
	sameKeyOtherEffect := taint(NotReadyTaintKey, "NoExecute")
	f := newFakeAPIServer(t, "node-1", other, taint(NotReadyTaintKey, "NoSchedule"), sameKeyOtherEffect)
	c, _ := testClient(t, f.Server)
	removed, err := c.RemoveNodeTaint(context.Background(), "node-1", NotReadyTaintKey, "NoSchedule")
	if err != nil || !removed {
		t.Fatalf("removeNodeTaint = %v, %v; want true, nil", removed, err)
	}
	got, _, patches := f.state()
	want := []any{map[string]any{"key": "dedicated", "effect": "NoSchedule"}, map[string]any{"key": NotReadyTaintKey, "effect": "NoExecute"}}
	if !reflect.DeepEqual(got, want) || patches != 1 {
		t.Fatalf("taints after removal %v (%d patches), want %v", got, patches, want)
	}
}

// Another writer changes the taints between the read and the patch: the
// patch's test fails, and the plugin reads again instead of removing the
// entry now at that index.
func TestRemoveNodeTaintRace(t *testing.T) {
	f := newFakeAPIServer(t, "node-1", taint("a", "NoSchedule"), taint(NotReadyTaintKey, "NoSchedule"))
	f.onPatch = func(taints []any) []any {
		return append([]any{taint("inserted", "NoSchedule")}, taints...)
	}
	c, _ := testClient(t, f.Server)
	removed, err := c.RemoveNodeTaint(context.Background(), "node-1", NotReadyTaintKey, "NoSchedule")
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
	c, _ := testClient(t, f.Server)
	removed, err := c.RemoveNodeTaint(context.Background(), "node-1", NotReadyTaintKey, "NoSchedule")
	if err != nil || removed {
		t.Fatalf("removeNodeTaint = %v, %v; want false, nil", removed, err)
	}
	if _, _, patches := f.state(); patches != 0 {
		t.Fatalf("%d PATCHes for a node without the taint", patches)
	}
}

func TestRemoveNodeTaintForbidden(t *testing.T) {
	f := newFakeAPIServer(t, "node-1", taint(NotReadyTaintKey, "NoSchedule"))
	f.status = http.StatusForbidden
	c, _ := testClient(t, f.Server)
	_, err := c.RemoveNodeTaint(context.Background(), "node-1", NotReadyTaintKey, "NoSchedule")
	if err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "get and patch on nodes") || !strings.Contains(err.Error(), "cannot patch resource") {
		t.Fatalf("err = %v; want the status, the API server's message and the RBAC hint", err)
	}
}
