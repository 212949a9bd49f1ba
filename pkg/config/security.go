package config

import (
	"fmt"
	"os"
	"syscall"
)

// CheckFileSecurity refuses a config file that anyone but root could have
// written: whoever can write it sets sysctls in every pod on the node.
func CheckFileSecurity(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return Problems{{File: path, Reason: fmt.Sprintf("cannot read config: %v", err)}}
	}
	var problems Problems
	if perm := info.Mode().Perm(); perm&0o022 != 0 {
		problems = append(problems, Problem{File: path, Reason: fmt.Sprintf(
			"config is writable by group or others (mode %04o), and whoever can write it sets sysctls in every pod; fix with: chmod go-w %s (or pass --allow-insecure-config)", perm, path)})
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
		problems = append(problems, Problem{File: path, Reason: fmt.Sprintf(
			"config is owned by uid %d, not root, and its owner could set sysctls in every pod; fix with: chown root %s (or pass --allow-insecure-config)", st.Uid, path)})
	}
	if len(problems) > 0 {
		return problems
	}
	return nil
}
