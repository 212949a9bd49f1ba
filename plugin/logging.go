// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"fmt"
	"io"
	"log/syslog"
	"os"
	"strings"
	"syscall"

	"github.com/coreos/go-systemd/v22/journal"
	"github.com/sirupsen/logrus"
	lsyslog "github.com/sirupsen/logrus/hooks/syslog"
)

// setupLogging sets where log lines go. containerd starts a pre-installed
// plugin with no stdout or stderr, so there the journal (or syslog) is the
// only place an operator can find them; under the systemd unit stderr is
// the journal already.
func setupLogging(log *logrus.Logger, stderr io.Writer, format, file string, preinstalled bool) (where string, closeFn func(), err error) {
	switch format {
	case "text", "":
		log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	case "json":
		log.SetFormatter(&logrus.JSONFormatter{})
	default:
		return "", nil, fmt.Errorf("bad --log-format %q: want text or json", format)
	}
	closeFn = func() {}
	switch {
	case file != "":
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
		if err != nil {
			return "", nil, fmt.Errorf("--log-file: %w", err)
		}
		log.SetOutput(f)
		return "file " + file, func() { f.Close() }, nil
	case !preinstalled:
		log.SetOutput(stderr)
		return "stderr", closeFn, nil
	case journal.Enabled():
		log.SetOutput(io.Discard)
		log.AddHook(journalHook{})
		return "the systemd journal", closeFn, nil
	}
	hook, err := lsyslog.NewSyslogHook("", "", syslog.LOG_INFO|syslog.LOG_DAEMON, "nri-sysctl")
	if err != nil {
		// Nowhere better to go: stderr, which containerd discards.
		log.SetOutput(stderr)
		return "stderr (no journal or syslog socket)", closeFn, nil
	}
	log.SetOutput(io.Discard)
	log.AddHook(hook)
	return "syslog", closeFn, nil
}

// journalHook sends each entry to the journal with its fields as journal
// fields (POD=..., KEY=...), so `journalctl POD=web-1` finds them.
type journalHook struct{}

func (journalHook) Levels() []logrus.Level { return logrus.AllLevels }

func (journalHook) Fire(e *logrus.Entry) error {
	vars := map[string]string{"SYSLOG_IDENTIFIER": "nri-sysctl"}
	for k, v := range e.Data {
		vars[journalFieldName(k)] = fmt.Sprint(v)
	}
	msg, err := e.String()
	if err != nil {
		msg = e.Message
	}
	return journal.Send(strings.TrimSuffix(msg, "\n"), journalPriority(e.Level), vars)
}

// journalFieldName makes a logrus field a valid journal field name:
// upper case letters, digits and underscores.
func journalFieldName(k string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, k)
}

func journalPriority(l logrus.Level) journal.Priority {
	switch l {
	case logrus.PanicLevel, logrus.FatalLevel:
		return journal.PriCrit
	case logrus.ErrorLevel:
		return journal.PriErr
	case logrus.WarnLevel:
		return journal.PriWarning
	case logrus.InfoLevel:
		return journal.PriInfo
	}
	return journal.PriDebug
}
