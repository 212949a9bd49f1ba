// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"os"
	"syscall"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/sirupsen/logrus"
)

// watchConfigFile turns changes of the config file's content into reload
// requests, merged with SIGHUP: the returned channel feeds watchReloads,
// which reloads one request at a time, with the keep-last-good rule of
// reload.
//
// A Kubernetes ConfigMap volume changes by a swap of its ..data symlink,
// and no signal reaches the pod, so the file is polled: its content, read
// through every symlink, is hashed every interval, and a new hash is one
// reload. A bad edit is therefore rejected once (and logged), not at every
// poll; the next edit is tried again.
func (p *plugin) watchConfigFile(ctx context.Context, path string, interval time.Duration, hup <-chan os.Signal, rejected string) <-chan os.Signal {
	out := make(chan os.Signal, 1)
	// The content in force, as it was read when loaded: an edit made
	// since then is a change to reload.
	// On the last good config, the file's content was rejected at start
	// (rejected, from loadInitialConfig).
	last := rejected
	if cfg := p.current.Load().cfg; cfg.Source == path {
		last = cfg.TextSHA256
	}
	p.log.WithFields(logrus.Fields{"file": path, "interval": interval.String()}).Info("watching the config file for changes")
	send := func(s os.Signal) {
		select {
		case out <- s:
		default: // a reload is already pending; it will read the newest file
		}
	}
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		var lastErr string
		for {
			select {
			case <-ctx.Done():
				return
			case s := <-hup:
				send(s)
			case <-tick.C:
				sum, err := configDigest(path)
				if err != nil {
					// Logged once per distinct error: a missing file
					// stays missing until someone fixes it.
					if err.Error() != lastErr {
						p.log.WithError(err).WithField("file", path).Warn("watching the config file: cannot read it; the config in force stays")
					}
					lastErr = err.Error()
					continue
				}
				lastErr = ""
				if sum == last {
					continue
				}
				last = sum
				p.log.WithField("file", path).Info("config file changed; reloading")
				send(syscall.SIGHUP)
			}
		}
	}()
	return out
}

// configDigest is the hex SHA-256 of what path leads to now, read by the
// config's own safe reader: it never blocks on a FIFO nor reads a huge file.
func configDigest(path string) (string, error) {
	data, err := config.ReadFile(path)
	if err != nil {
		return "", err
	}
	return config.TextSHA256(data), nil
}
