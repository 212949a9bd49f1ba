package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/nri-sysctl/nri-sysctl/pkg/config"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
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
func (p *plugin) watchConfigFile(ctx context.Context, path string, interval time.Duration, hup <-chan os.Signal) <-chan os.Signal {
	out := make(chan os.Signal, 1)
	// The content in force: the config was loaded just before.
	last, err := configDigest(path)
	if err != nil {
		p.log.WithError(err).WithField("file", path).Warn("watching the config file: cannot read it yet")
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

// configDigest hashes what path leads to now. It never blocks on a FIFO
// and reads at most one byte more than a config may have.
func configDigest(path string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return sum, err
	}
	if !info.Mode().IsRegular() {
		return sum, errors.New("not a regular file")
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, config.MaxFileSize+1))
	if err != nil {
		return sum, err
	}
	if n > config.MaxFileSize {
		return sum, fmt.Errorf("larger than %d bytes", config.MaxFileSize)
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}
