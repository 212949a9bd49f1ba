{{/* Names, labels and the paths the DaemonSet mounts. */}}

{{- define "nri-sysctl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "nri-sysctl.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "nri-sysctl.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "nri-sysctl.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "nri-sysctl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nri-sysctl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "nri-sysctl.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "nri-sysctl.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "nri-sysctl.serviceAccountName" -}}
{{- default (include "nri-sysctl.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{- define "nri-sysctl.configMapName" -}}
{{- if .Values.existingConfigMap }}
{{- .Values.existingConfigMap }}
{{- else if eq .Values.configRollout "staged" }}
{{- /* Staged: the name carries the config's hash, so an edit is a new
       ConfigMap and a new DaemonSet template, rolled node by node. */}}
{{- printf "%s-%s" (include "nri-sysctl.fullname" .) (sha256sum .Values.config | trunc 10) }}
{{- else }}
{{- include "nri-sysctl.fullname" . }}
{{- end }}
{{- end }}

{{/* The default tag is the appVersion as make image tags the image: an
     OCI tag has no "+", so build metadata's "+" becomes "_" (hack/version). */}}
{{- define "nri-sysctl.image" -}}
{{- printf "%s:%s" .Values.image.repository (default (replace "+" "_" .Chart.AppVersion) .Values.image.tag) }}
{{- end }}

{{/* The directory of a socket path: the DaemonSet mounts directories, not
     socket files, so that a runtime restart (a new socket inode) is seen. */}}
{{- define "nri-sysctl.socketDir" -}}
{{- $d := dir . }}
{{- if or (eq $d ".") (eq $d "/") (not (isAbs .)) }}
{{- fail (printf "socket path %q: want an absolute path to a socket inside a directory other than /" .) }}
{{- end }}
{{- $d }}
{{- end }}

{{/* The monitoring objects read the plugin's metrics: refuse them without. */}}
{{- define "nri-sysctl.needsMetrics" -}}
{{- if not .root.Values.metrics.enabled }}
{{- fail (printf "%s.enabled needs metrics.enabled: without it the plugin serves no metrics" .what) }}
{{- end }}
{{- end }}

{{/* The series every alert reads: the PodMonitor's job unless set. */}}
{{- define "nri-sysctl.ruleSelector" -}}
{{- default (printf "job=%q" (include "nri-sysctl.fullname" .)) .Values.prometheusRule.selector }}
{{- end }}
