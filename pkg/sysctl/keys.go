// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package sysctl

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
