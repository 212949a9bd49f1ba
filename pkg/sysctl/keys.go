// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package sysctl

import "strings"

// PingGroupRange is the one sysctl whose value names group IDs: inside a
// pod's user namespace only the mapped GIDs exist, and a writer in the
// host's user namespace must give host GIDs.
const PingGroupRange = "net.ipv4.ping_group_range"

// kubernetesSafe is Kubernetes' safe set (1.29+, with tcp_rmem and
// tcp_wmem from 1.32): the sysctls kubelet lets any pod set without
// --allowed-unsafe-sysctls. Anything else a pod can be given by a label or
// an annotation it writes itself is a grant the admin must bound.
var kubernetesSafe = map[string]bool{
	"kernel.shm_rmid_forced":              true,
	"net.ipv4.ip_local_port_range":        true,
	"net.ipv4.tcp_syncookies":             true,
	PingGroupRange:                        true,
	"net.ipv4.ip_unprivileged_port_start": true,
	"net.ipv4.ip_local_reserved_ports":    true,
	"net.ipv4.tcp_keepalive_time":         true,
	"net.ipv4.tcp_fin_timeout":            true,
	"net.ipv4.tcp_keepalive_intvl":        true,
	"net.ipv4.tcp_keepalive_probes":       true,
	"net.ipv4.tcp_rmem":                   true,
	"net.ipv4.tcp_wmem":                   true,
}

// KubernetesSafe tells whether kubelet counts the normalized key as safe.
func KubernetesSafe(key string) bool { return kubernetesSafe[key] }

// copiedFromHost lists the keys a new network namespace takes from the
// host's (the initial namespace's) values at its creation, rather than
// from kernel defaults: net.ipv4.conf.all and .default (and, with
// net.core.devconf_inherit_init_net=1, net.ipv6.conf's), tcp_rmem,
// tcp_wmem and tcp_congestion_control. An interface made in the pod takes
// its conf.* values from the pod's conf.default, and its neigh.* values
// from the host's neigh.default, so per-interface keys belong here too.
// For these keys a pod's value that differs from a namespace made now may
// be the host's value of the day the pod was made, not another writer's.
var copiedFromHost = struct {
	prefixes []string
	names    map[string]bool
}{
	prefixes: []string{"net.ipv4.conf.", "net.ipv6.conf.", "net.ipv4.neigh.", "net.ipv6.neigh."},
	names: map[string]bool{
		"net.ipv4.tcp_rmem":               true,
		"net.ipv4.tcp_wmem":               true,
		"net.ipv4.tcp_congestion_control": true,
	},
}

// CopiedFromHost tells whether a new network namespace takes the
// normalized key's value from the host's at its creation.
func CopiedFromHost(key string) bool {
	if copiedFromHost.names[key] {
		return true
	}
	for _, p := range copiedFromHost.prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}
