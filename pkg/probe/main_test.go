// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package probe

import (
	"os"
	"testing"
	"time"
)

// The package's tests re-execute the test binary as the helper, as the
// plugin re-executes itself: dispatch before the tests run.
func TestMain(m *testing.M) {
	if IsHelper(os.Args) {
		afterWrite = pauseAtFIFO
		os.Exit(RunHelper(os.Args))
	}
	if len(os.Args) > 0 {
		switch os.Args[0] {
		case userNSHostArg0:
			os.Exit(userNSHost())
		case probeUserKeysArg0:
			afterWrite = pauseAtFIFO
			os.Exit(probeUserKeysAndPrint())
		case reportFilesArg0:
			os.Exit(reportFiles())
		case noUserNamespacesArg0:
			os.Exit(probeWithNoUserNamespaces())
		case hangArg0:
			time.Sleep(time.Hour)
		}
	}
	os.Exit(m.Run())
}
