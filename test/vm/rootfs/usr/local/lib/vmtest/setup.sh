#!/bin/bash
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
case $scenario in
compare-kubelet | compare-both) cat "$L/kubelet-default-pod-sysctls.yaml" >>/etc/kubernetes/kubelet.yaml ;;
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
