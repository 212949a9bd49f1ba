// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

// Pods created in parallel, the way a node starts many pods at once (a
// rollout, a node drain elsewhere): every one of them gets the defaults.

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// concPod is one pod of a parallel run, with its single container.
type concPod struct {
	pod   *Pod
	ctrID string
	vals  map[string]string // read inside the container
	err   error
}

// runPodWithContainer runs a pod, creates and starts one container
// (sleep 3600) in it and reads keys inside that container. It uses no
// *testing.T, so that it can run on any goroutine; on error it returns what
// was created so far, for clean-up.
func (c *cluster) runPodWithContainer(spec PodSpec, keys []string) concPod {
	var r concPod
	r.pod, r.err = c.runPodErr(spec)
	if r.err != nil {
		return r
	}
	if r.ctrID, r.err = c.createContainerErr(r.pod, "app", []string{"sleep", "3600"}); r.err != nil {
		return r
	}
	if _, r.err = c.crictlRaw("start", r.ctrID); r.err != nil {
		return r
	}
	r.vals, r.err = c.readSysctlsErr(r.ctrID, keys...)
	return r
}

// removePodsParallel removes pods with the given number of workers.
func (c *cluster) removePodsParallel(ids []string, workers int) {
	jobs := make(chan string)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range jobs {
				c.removePod(id)
			}
		}()
	}
	for _, id := range ids {
		jobs <- id
	}
	close(jobs)
	wg.Wait()
}

// livePodIDs lists the pod sandboxes containerd knows of.
func (c *cluster) livePodIDs() (map[string]bool, error) {
	out, err := c.crictlRaw("pods", "-q")
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for _, id := range strings.Fields(out) {
		ids[id] = true
	}
	return ids, nil
}

// TestConcurrentPods: 100 pods created by 8 parallel workers (run pod,
// create, start: the CRI calls kubelet makes) all get the node defaults,
// read inside each container; then all of them are removed.
func TestConcurrentPods(t *testing.T) {
	const (
		pods    = 100
		workers = 8
	)
	c := getCluster(t)
	burstLock.hold(t, true) // hostlock_test.go
	checkMeaningful(t, nodeDefaults)
	plugin := startPlugin(t, defaultsYAML(nodeDefaults))
	keys := sortedKeys(nodeDefaults)

	results := make([]concPod, pods)
	var (
		mu      sync.Mutex
		created []string
	)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		c.removePodsParallel(created, workers) // no-op once removed below
	})

	start := time.Now()
	jobs := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				r := c.runPodWithContainer(PodSpec{Name: fmt.Sprintf("conc-%03d", i), Namespace: "e2e-concurrency"}, keys)
				results[i] = r
				if r.pod != nil {
					mu.Lock()
					created = append(created, r.pod.ID)
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < pods; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	t.Logf("%d pods (one container each) created, started and read by %d workers in %s", pods, workers, time.Since(start).Round(time.Millisecond))

	failed := 0
	for i, r := range results {
		if r.err != nil {
			failed++
			t.Errorf("pod %d: %v", i, r.err)
			continue
		}
		wantSysctls(t, fmt.Sprintf("pod conc-%03d", i), r.vals, nodeDefaults)
	}
	if failed == 0 {
		t.Logf("all %d containers read %v", pods, only(results[0].vals, keys...))
	}
	if !plugin.running() {
		t.Fatal("the plugin exited during the parallel run")
	}

	// Remove them all, in parallel as well.
	start = time.Now()
	mu.Lock()
	ids := append([]string(nil), created...)
	created = nil
	mu.Unlock()
	c.removePodsParallel(ids, workers)
	t.Logf("%d pods removed by %d workers in %s", len(ids), workers, time.Since(start).Round(time.Millisecond))
	live, err := c.livePodIDs()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, id := range ids {
		if live[id] {
			left = append(left, id)
		}
	}
	sort.Strings(left)
	if len(left) > 0 {
		t.Errorf("%d pod(s) still present after removal: %v", len(left), left)
	}
	if !plugin.running() {
		t.Error("the plugin exited while the pods were removed")
	}
}
