// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package sysctl

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Stored is what the kernel did with one value written to a sysctl in a
// throw-away namespace (pkg/probe): the write's error, or the file's text
// read back.
type Stored struct {
	// Err is the write's error (an errno); nil when the kernel took it.
	Err error
	// Text is the file read back after the write, without the trailing
	// newline.
	Text string
	// Unreadable is set for a file that cannot be read back: a
	// write-only sysctl such as net.ipv4.route.flush.
	Unreadable bool
	// Again is the file read back after Text itself was written, set
	// only when Text differs from the value beyond white space: a form
	// the kernel does not keep when it is written again is no form to
	// give pods.
	Again string
}

// ValueError is a value the kernel does not take as written; its text is
// the reason.
type ValueError struct{ reason string }

func (e *ValueError) Error() string { return e.reason }

func refused(format string, args ...any) error {
	return &ValueError{reason: fmt.Sprintf(format, args...)}
}

// Fold is a value with each run of white space (spaces, tabs) made one
// space and none at either end: the kernel reads fields split by any white
// space and prints them with tabs, so folded forms compare.
func Fold(value string) string { return strings.Join(strings.Fields(value), " ") }

// roundingSlack bounds the difference the kernel's rounding of a time makes
// to a decimal integer: a value in milliseconds or USER_HZ ticks is kept in
// jiffies, and a jiffy is at most 10 ms (HZ >= 100). 1001 is stored as 1004
// at HZ=250.
const roundingSlack = 10

// Judge says whether the kernel stored a written value with the meaning it
// was written with, and returns the form pods are given: the kernel's own,
// folded for integer fields. The rules, by the kind of each
// white-space-separated field:
//   - the kernel refused the write (an errno): refused;
//   - the file cannot be read back (write-only): taken as written;
//   - the same fields but for white space: taken;
//   - the field count changed (ping_group_range "1 2 3" is stored as "1 2",
//     kernel.sem "7" as "7 32000 32 128"): refused;
//   - an integer field read as another number than its decimal reading
//     ("010" is octal 8 to the kernel, "0x10" is 16): refused;
//   - a decimal integer stored within roundingSlack of itself: the kernel's
//     rounding of a time unit, taken in the kernel's form;
//   - a decimal integer stored as another number: refused;
//   - text cut short (kernel.domainname past 64 bytes): refused;
//   - other text: the kernel's canonical form (tcp_fastopen_key's
//     zero-padded hex), taken in that form;
//   - a form that changes again when written back: refused.
func Judge(written string, s Stored) (string, error) {
	if s.Err != nil {
		return "", refused("the kernel refuses %q (%v)", written, s.Err)
	}
	if s.Unreadable {
		return written, nil
	}
	w, k := strings.Fields(written), strings.Fields(s.Text)
	if slices.Equal(w, k) {
		return canonical(s.Text, k), nil
	}
	if len(w) > len(k) && allIntegers(w) {
		return "", refused("the kernel stores %q as %q: it keeps %d of its %d fields", written, Fold(s.Text), len(k), len(w))
	}
	if len(w) < len(k) && allIntegers(w) {
		// kernel.sem "7" sets one field of four: the pod would read
		// the others too.
		return "", refused("the kernel stores %q as %q; write all %d fields", written, Fold(s.Text), len(k))
	}
	if len(w) == len(k) {
		for i := range w {
			ok, hint := sameMeaning(w[i], k[i])
			switch {
			case ok:
			case len(w) == 1:
				return "", refused("the kernel stores %q as %q; write %s%s", written, k[i], k[i], hint)
			default:
				return "", refused("the kernel stores %q as %q (field %d); write %q%s", written, Fold(s.Text), i+1, Fold(s.Text), hint)
			}
		}
	}
	if len(s.Text) < len(written) && s.Text != "" && strings.HasPrefix(written, s.Text) {
		return "", refused("the kernel keeps only the first %d of its %d bytes", len(s.Text), len(written))
	}
	if s.Again != "" && Fold(s.Again) != Fold(s.Text) {
		return "", refused("the kernel stores %q as %q, and that as %q: it keeps no stable form of it", written, Fold(s.Text), Fold(s.Again))
	}
	return canonical(s.Text, k), nil
}

// sameMeaning compares one written field with the kernel's; hint says why
// they differ, for the message.
func sameMeaning(w, k string) (ok bool, hint string) {
	kn, kIsInt := parseInt(k)
	if !kIsInt {
		return true, "" // text: the kernel's form
	}
	wn, wIsInt := parseInt(w)
	unsigned := strings.TrimLeft(w, "+-")
	switch {
	case wIsInt && wn == kn:
		return true, "" // "+5", "007": the same number
	case wIsInt && w == strconv.FormatInt(wn, 10) && abs(wn-kn) < roundingSlack:
		return true, "" // the kernel's rounding of a time
	case wIsInt && len(unsigned) > 1 && unsigned[0] == '0':
		return false, " (a leading 0 makes the kernel read octal)"
	case looksHex(w):
		return false, " (0x makes the kernel read hexadecimal)"
	}
	return false, ""
}

func parseInt(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

func looksHex(s string) bool {
	s = strings.TrimLeft(s, "+-")
	return strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X")
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

func allIntegers(fields []string) bool {
	for _, f := range fields {
		if _, ok := parseInt(f); !ok && !looksHex(f) {
			return false
		}
	}
	return len(fields) > 0
}

// canonical is the form pods are given: integer fields folded to single
// spaces (the kernel prints tabs), text exactly as the kernel keeps it.
func canonical(text string, fields []string) string {
	if allIntegers(fields) {
		return strings.Join(fields, " ")
	}
	return text
}
