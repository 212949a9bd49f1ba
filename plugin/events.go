// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

// Kubernetes Events on the plugin's own pod (--kubernetes-events,
// kubeapi.EventRecorder), so that a rejected config shows where a cluster
// operator looks.

// Reasons of the plugin's Events.
const (
	reasonConfigRejected = "ConfigRejected"
	reasonLastGoodConfig = "LastGoodConfig"
	reasonConfigReloaded = "ConfigReloaded"
)

// eventSink takes the plugin's Events and returns at once (a
// *kubeapi.EventRecorder).
type eventSink interface {
	Warn(reason, message string)
	Normal(reason, message string)
}

// noEvents drops every Event: --kubernetes-events is off.
type noEvents struct{}

func (noEvents) Warn(string, string)   {}
func (noEvents) Normal(string, string) {}
