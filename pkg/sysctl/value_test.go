// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package sysctl

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// Each case is what this machine's kernel (6.18, HZ=250) did with the
// value in a fresh namespace (see ../shared runtime notes and the probe's
// own test, which writes them for real).
func TestJudge(t *testing.T) {
	tests := []struct {
		name    string
		written string
		stored  Stored
		want    string // the form pods get; "" when refused
		wantErr string
	}{
		{"taken as written", "600", Stored{Text: "600"}, "600", ""},
		{"negative taken as is", "-5", Stored{Text: "-5"}, "-5", ""},
		{"spaces around", " 600 ", Stored{Text: "600"}, "600", ""},
		{"tab between fields", "10000\t60999", Stored{Text: "10000\t60999"}, "10000 60999", ""},
		{"spaces between fields", "10000   60999", Stored{Text: "10000\t60999"}, "10000 60999", ""},
		{"the whole GID range", "0 2147483647", Stored{Text: "0\t2147483647"}, "0 2147483647", ""},
		{"plus sign", "+5", Stored{Text: "5"}, "5", ""},
		{"leading zeros, same number", "007", Stored{Text: "7"}, "7", ""},
		{"jiffies rounding", "1001", Stored{Text: "1004", Again: "1004"}, "1004", ""},
		{"canonical text", "1-2-3-4", Stored{Text: "00000001-00000002-00000003-00000004", Again: "00000001-00000002-00000003-00000004"}, "00000001-00000002-00000003-00000004", ""},
		{"text kept exactly", "bbr", Stored{Text: "bbr"}, "bbr", ""},
		{"write-only", "1", Stored{Unreadable: true}, "1", ""},

		{"not a number", "abc", Stored{Err: unix.EINVAL}, "", `the kernel refuses "abc" (invalid argument)`},
		{"low above high", "60000 1000", Stored{Err: unix.EINVAL}, "", `the kernel refuses "60000 1000" (invalid argument)`},
		{"octal", "010", Stored{Text: "8"}, "", `the kernel stores "010" as "8"; write 8 (a leading 0 makes the kernel read octal)`},
		{"hexadecimal", "0x10", Stored{Text: "16"}, "", `the kernel stores "0x10" as "16"; write 16 (0x makes the kernel read hexadecimal)`},
		{"a field dropped", "1 2 3", Stored{Text: "1\t2"}, "", `the kernel stores "1 2 3" as "1 2": it keeps 2 of its 3 fields`},
		{"a field dropped from a vector", "4096 131072 6291456 9", Stored{Text: "4096\t131072\t6291456"}, "", `the kernel stores "4096 131072 6291456 9" as "4096 131072 6291456": it keeps 3 of its 4 fields`},
		{"fields left out", "7", Stored{Text: "7\t1024000000\t500\t32000"}, "", `the kernel stores "7" as "7 1024000000 500 32000"; write all 4 fields`},
		{"clamped far off", "100000000", Stored{Text: "65535"}, "", `the kernel stores "100000000" as "65535"; write 65535`},
		{"a field changed", "10 0100", Stored{Text: "10\t64"}, "", `the kernel stores "10 0100" as "10 64" (field 2); write "10 64" (a leading 0 makes the kernel read octal)`},
		{"octal within the rounding slack", "0010", Stored{Text: "8"}, "", `the kernel stores "0010" as "8"; write 8 (a leading 0 makes the kernel read octal)`},
		{"text cut short", "aaaaaaaaaa", Stored{Text: "aaaa"}, "", `the kernel keeps only the first 4 of its 10 bytes`},
		{"no stable form", "x", Stored{Text: "y", Again: "z"}, "", `the kernel stores "x" as "y", and that as "z": it keeps no stable form of it`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Judge(tt.written, tt.stored)
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("Judge(%q, %+v) = %q, %v; want %q", tt.written, tt.stored, got, err, tt.want)
				}
				return
			}
			var ve *ValueError
			if !errors.As(err, &ve) || err.Error() != tt.wantErr {
				t.Fatalf("Judge(%q, %+v) = %q, %v; want the error %q", tt.written, tt.stored, got, err, tt.wantErr)
			}
		})
	}
}
