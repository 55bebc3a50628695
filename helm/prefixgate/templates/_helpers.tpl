{{/*
The chart's name, at most 63 characters (the DNS label limit).
*/}}
{{- define "prefixgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the release's objects: the release name, followed by the chart name unless it already contains it.
*/}}
{{- define "prefixgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "prefixgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels.
*/}}
{{- define "prefixgate.labels" -}}
helm.sh/chart: {{ include "prefixgate.chart" . }}
{{ include "prefixgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels (immutable once the Deployment exists).
*/}}
{{- define "prefixgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "prefixgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The service account's name.
*/}}
{{- define "prefixgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "prefixgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The port of a HOST:PORT string (config.listen, config.admin_listen). Called with the string itself.
*/}}
{{- define "prefixgate.port" -}}
{{- $port := regexFind "[0-9]+$" (toString .) }}
{{- if not $port }}
{{- fail (printf "expected HOST:PORT, got %q" (toString .)) }}
{{- end }}
{{- $port }}
{{- end }}

{{/*
The gateway's configuration file (prefixgate.yaml). Its hash is the checksum/config annotation, so a change rolls
the pods; the pods file is left out of the hash because the gateway reloads it in place.
*/}}
{{- define "prefixgate.config" -}}
{{- $admin := toString .Values.config.admin_listen }}
{{- if or (hasPrefix "127." $admin) (hasPrefix "localhost:" $admin) (hasPrefix "[::1]" $admin) }}
{{- fail "config.admin_listen must not be a loopback address: the kubelet's probes reach the admin port on the pod IP" }}
{{- end }}
{{- $file := dig "discovery" "file" "" .Values.config }}
{{- if and $file (not (has $file (list "pods.yaml" "/etc/prefixgate/pods.yaml"))) }}
{{- fail (printf "config.discovery.file must be pods.yaml (the chart's pods list), got %q" $file) }}
{{- end }}
{{- toYaml .Values.config }}
{{- end }}
