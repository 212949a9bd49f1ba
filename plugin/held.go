// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"fmt"
	"sync"

	"github.com/containerd/nri/pkg/api"
	"github.com/nri-sysctl/nri-sysctl/pkg/podns"
)

// heldPods holds each pod's sandbox process from when the plugin first
// sees the pod running (RunPodSandbox, Synchronize) until the pod is
// stopped or removed: every read or write in a pod's namespaces, at
// creation or in a convergence, goes through what was held then, never
// through a pid learnt later, which may name an unrelated process by
// then. mu is a leaf: the holds themselves are taken outside it.
type heldPods struct {
	mu   sync.Mutex
	pods map[string]heldPod
	// take holds a pod's process (holdSandbox); tests that fake the
	// kernel's side swap it.
	take func(pod *api.PodSandbox) (heldProcess, error)
}

// heldProcess is a pod's sandbox process held (podns.Held).
type heldProcess interface {
	Target() (podns.Target, func(), error)
	Close()
}

// heldPod is a pod's process held, or why it could not be.
type heldPod struct {
	held heldProcess
	err  error
}

func newHeldPods() heldPods {
	return heldPods{take: func(pod *api.PodSandbox) (heldProcess, error) { return holdSandbox(podns.Linux, pod) }}
}

// holdSandbox holds the pod's process now, through host, once sure it is
// the pod's: in the sandbox's own cgroup.
func holdSandbox(host podns.Host, pod *api.PodSandbox) (heldProcess, error) {
	_, target := readSandbox(pod, true)
	owner := host.InSandboxCgroup(pod.GetId(), pod.GetLinux().GetCgroupsPath())
	held, err := host.Hold(target, int(pod.GetPid()), owner)
	if err != nil {
		return nil, err
	}
	return held, nil
}

// hold holds the pod's process unless it is held already: a pod is held
// from its first sight on, not again.
func (h *heldPods) hold(pod *api.PodSandbox) {
	h.mu.Lock()
	_, known := h.pods[pod.GetId()]
	h.mu.Unlock()
	if known {
		return
	}
	held, err := h.take(pod)
	next := heldPod{held: held, err: err}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, known := h.pods[pod.GetId()]; known {
		next.close()
		return
	}
	if h.pods == nil {
		h.pods = map[string]heldPod{}
	}
	h.pods[pod.GetId()] = next
}

// sync makes the held pods those of pods (Synchronize): ones held before
// keep what was held at their first sight, new ones are held now, the
// others are released.
func (h *heldPods) sync(pods []*api.PodSandbox) {
	keep := make(map[string]bool, len(pods))
	for _, pod := range pods {
		keep[pod.GetId()] = true
		h.hold(pod)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, hp := range h.pods {
		if !keep[id] {
			hp.close()
			delete(h.pods, id)
		}
	}
}

// release lets the pod go: stopped or removed, its pid may be reused.
func (h *heldPods) release(podID string) {
	h.mu.Lock()
	hp, ok := h.pods[podID]
	delete(h.pods, podID)
	h.mu.Unlock()
	if ok {
		hp.close()
	}
}

// target is the pod's namespaces as held (podns.Held.Target); release
// closes what it opened.
func (h *heldPods) target(podID string) (podns.Target, func(), error) {
	h.mu.Lock()
	hp, ok := h.pods[podID]
	h.mu.Unlock()
	switch {
	case !ok:
		return nil, nil, fmt.Errorf("%w: the plugin has not seen the pod running", podns.ErrNotHeld)
	case hp.err != nil:
		return nil, nil, fmt.Errorf("%w since the plugin first saw the pod: %w", podns.ErrNotHeld, hp.err)
	}
	return hp.held.Target()
}

func (hp heldPod) close() {
	if hp.held != nil {
		hp.held.Close()
	}
}
