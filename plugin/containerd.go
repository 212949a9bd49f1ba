package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/nri-sysctl/nri-sysctl/pkg/podsysctl"
	"github.com/sirupsen/logrus"
)

// containerdTarget is where pods are looked up.
type containerdTarget struct {
	address, namespace string
}

// resolveContainerd picks the containerd socket and namespace: a flag given
// on the command line, then the config's containerdAddress /
// containerdNamespace, then the flag's default. A pre-installed plugin
// gets no flags, so its config is the only way to name another socket.
func resolveContainerd(o options, cfg *config.Config) containerdTarget {
	t := containerdTarget{address: o.containerdAddress, namespace: o.containerdNamespace}
	if !o.containerdAddressSet && cfg.ContainerdAddress != "" {
		t.address = cfg.ContainerdAddress
	}
	if !o.containerdNamespaceSet && cfg.ContainerdNamespace != "" {
		t.namespace = cfg.ContainerdNamespace
	}
	return t
}

// switchingFetcher is a podsysctl.Fetcher whose containerd connection
// follows the config in force (the config may arrive only in Configure, or
// change on reload).
type switchingFetcher struct {
	log *logrus.Logger
	mu  sync.Mutex
	cur containerdTarget
	f   *podsysctl.Containerd
}

// use points the fetcher at t; it does nothing if t is already in use.
func (s *switchingFetcher) use(t containerdTarget) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil && s.cur == t {
		return nil
	}
	f, err := podsysctl.NewContainerd(t.address, t.namespace)
	if err != nil {
		return err
	}
	old := s.f
	s.cur, s.f = t, f
	if old != nil {
		// A lookup may still be using the old connection; lookups time
		// out after a few seconds.
		time.AfterFunc(30*time.Second, func() { old.Close() })
	}
	s.log.Infof("looking up pods' own sysctls in containerd at %s, namespace %s", t.address, t.namespace)
	go func() {
		if v, err := f.Check(context.Background()); err != nil {
			s.log.Errorf("cannot reach containerd at %s (%v): pods will get no defaults until it answers; check --containerd-address or containerdAddress", t.address, err)
		} else {
			s.log.Infof("containerd %s answers at %s", v, t.address)
		}
	}()
	return nil
}

func (s *switchingFetcher) Fetch(ctx context.Context, podID string) (podsysctl.PodSysctls, error) {
	s.mu.Lock()
	f := s.f
	s.mu.Unlock()
	if f == nil {
		return podsysctl.PodSysctls{}, fmt.Errorf("no containerd connection configured")
	}
	return f.Fetch(ctx, podID)
}

func (s *switchingFetcher) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}
