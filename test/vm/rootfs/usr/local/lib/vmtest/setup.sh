#!/bin/bash
# Copyright The nri-sysctl Authors.
# SPDX-License-Identifier: Apache-2.0
# Scenario set-up, run by vmtest-setup.service before containerd,
# nri-sysctl and kubelet. The scenario comes from the kernel command line:
#   vmtest.scenario=service          nri-sysctl.service (default)
#   vmtest.scenario=preinstalled     containerd starts /opt/nri/plugins/90-sysctl
#   vmtest.scenario=compare-kubelet  kubelet's defaultPodSysctls, no plugin
#   vmtest.scenario=compare-plugin   the plugin, no kubelet feature
#   vmtest.scenario=compare-both     both
# (vmtest.break= is handled by the generator, vmtest-scenario.)
set -euo pipefail
L=/usr/local/lib/vmtest
scenario=service
for w in $(</proc/cmdline); do
	case $w in
	vmtest.scenario=*) scenario=${w#*=} ;;
	esac
done
echo "$scenario" >/run/vmtest-scenario

set=node
case $scenario in compare-*) set=compare ;; esac
mkdir -p /etc/kubernetes/manifests
rm -f /etc/kubernetes/manifests/*
cp "$L/manifests/$set/"*.yaml /etc/kubernetes/manifests/

cp "$L/kubelet.yaml" /etc/kubernetes/kubelet.yaml
# kubelet's --config-dir (kubelet.service): drop-ins merged over kubelet.yaml.
mkdir -p /etc/kubernetes/kubelet.conf.d
rm -f /etc/kubernetes/kubelet.conf.d/*
case $scenario in
compare-kubelet | compare-both)
	# kubelet's own defaults (defaultPodSysctls), exported on this node from
	# the comparison's plugin config, as docs/kubelet-comparison.md tells a
	# user to move to kubelet's feature.
	/usr/bin/nri-sysctl export-kubelet --config "$L/compare-config.yaml" >/run/vmtest-export-kubelet.conf
	mv /run/vmtest-export-kubelet.conf /etc/kubernetes/kubelet.conf.d/50-nri-sysctl.conf
	;;
esac
case $scenario in
compare-plugin) install -m 0600 "$L/compare-config.yaml" /etc/nri-sysctl/config.yaml ;;
compare-both) install -m 0600 "$L/compare-config-both.yaml" /etc/nri-sysctl/config.yaml ;;
esac
case $scenario in
compare-*) cp "$L/containerd-userns.toml" /etc/containerd/conf.d/50-vmtest-userns.toml ;;
esac

if [[ $scenario == preinstalled ]]; then
	# docs/deploying.md's "Pre-installed: containerd starts it", word for word.
	install -D -m 0755 /usr/bin/nri-sysctl /opt/nri/plugins/90-sysctl
	install -D -m 0600 /etc/nri-sysctl/config.yaml /etc/nri/conf.d/90-sysctl.conf
	cp /usr/share/nri-sysctl/containerd/20-nri-sysctl-preinstalled.toml /etc/containerd/conf.d/
fi
