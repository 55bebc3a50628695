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
The port of a HOST:PORT string (config.listen, config.admin_listen, config.health_listen). Called with the string
itself.
*/}}
{{- define "prefixgate.port" -}}
{{- $port := regexFind "[0-9]+$" (toString .) }}
{{- if not $port }}
{{- fail (printf "expected HOST:PORT, got %q" (toString .)) }}
{{- end }}
{{- $port }}
{{- end }}

{{/*
Where the admin token Secret (metrics.enabled) and the API keys Secret (apiKeys.secretName) are mounted.
*/}}
{{- define "prefixgate.adminTokenDir" -}}
/var/run/secrets/prefixgate/admin
{{- end }}
{{- define "prefixgate.apiKeysDir" -}}
/var/run/secrets/prefixgate/api-keys
{{- end }}

{{/*
Whether a HOST:PORT string binds loopback only.
*/}}
{{- define "prefixgate.isLoopback" -}}
{{- $hostport := toString . }}
{{- if or (hasPrefix "127." $hostport) (hasPrefix "localhost:" $hostport) (hasPrefix "[::1]" $hostport) }}true{{ end }}
{{- end }}

{{/*
The gateway's configuration file (prefixgate.yaml): `config:` as given, except that metrics.enabled opens the admin
listener on all addresses and points auth.admin_token_file at the mounted Secret, apiKeys.secretName sets
auth.api_keys_file to the mounted keys file, config.discovery.kubernetes replaces the file discovery (its namespaces
default to the release's), and redis.deploy points state sync at the chart's Redis. Its hash is the checksum/config
annotation, so a change rolls the pods; the pods file is left out of the hash because the gateway reloads it in
place. Refused: probes that cannot reach the health listener, and an admin listener open without a token.
*/}}
{{- define "prefixgate.config" -}}
{{- $config := deepCopy .Values.config }}
{{- $health := toString (default "" $config.health_listen) }}
{{- if or (not $health) (include "prefixgate.isLoopback" $health) }}
{{- fail "config.health_listen must be set and not loopback: the kubelet's probes reach /healthz and /readyz there on the pod IP" }}
{{- end }}
{{- if .Values.metrics.enabled }}
{{- if not .Values.metrics.adminTokenSecret.name }}
{{- fail "metrics.enabled needs metrics.adminTokenSecret.name: the admin listener is opened to Prometheus only behind a token" }}
{{- end }}
{{- $_ := set $config "admin_listen" (printf "0.0.0.0:%s" (include "prefixgate.port" $config.admin_listen)) }}
{{- $auth := default dict $config.auth }}
{{- $_ := set $auth "admin_token_file" (printf "%s/%s" (include "prefixgate.adminTokenDir" .) .Values.metrics.adminTokenSecret.key) }}
{{- $_ := set $config "auth" $auth }}
{{- else if and (not (include "prefixgate.isLoopback" $config.admin_listen)) (not (dig "auth" "admin_token_file" "" $config)) }}
{{- fail "config.admin_listen is not loopback but no admin token is set: use metrics.enabled (with a token Secret) or keep it on 127.0.0.1" }}
{{- end }}
{{- if .Values.apiKeys.secretName }}
{{- $auth := default dict $config.auth }}
{{- $_ := set $auth "api_keys_file" (printf "%s/%s" (include "prefixgate.apiKeysDir" .) .Values.apiKeys.key) }}
{{- $_ := set $config "auth" $auth }}
{{- end }}
{{- if include "prefixgate.kubernetesDiscovery" . }}
{{- if .Values.pods }}
{{- fail "pods: lists engines for file discovery; with config.discovery.kubernetes the EndpointSlices name them: leave pods empty" }}
{{- end }}
{{- $kubernetes := deepCopy $config.discovery.kubernetes }}
{{- $_ := set $kubernetes "namespaces" (include "prefixgate.discoveryNamespaces" . | fromJsonArray) }}
{{- $_ := set $config "discovery" (dict "kubernetes" $kubernetes) }}
{{- else }}
{{- $file := dig "discovery" "file" "" $config }}
{{- if and $file (not (has $file (list "pods.yaml" "/etc/prefixgate/pods.yaml"))) }}
{{- fail (printf "config.discovery.file must be pods.yaml (the chart's pods list), got %q" $file) }}
{{- end }}
{{- end }}
{{- if .Values.redis.deploy }}
{{- $sync := default dict $config.state_sync }}
{{- $_ := set $sync "enabled" true }}
{{- $_ := set $sync "redis" (printf "redis://%s:%d" (include "prefixgate.redisName" .) (int .Values.redis.port)) }}
{{- $_ := set $config "state_sync" $sync }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/*
"true" when config.discovery.kubernetes is set, even to {} (every key at its default): the gateway then watches EndpointSlices (replacing the file
discovery the defaults set up), so the pods get a service account token and the RBAC of rbac.yaml.
*/}}
{{- define "prefixgate.kubernetesDiscovery" -}}
{{- if hasKey (default dict .Values.config.discovery) "kubernetes" }}true{{ end }}
{{- end }}

{{/*
The namespaces the gateway watches for EndpointSlices: config.discovery.kubernetes.namespaces, or the release's own.
*/}}
{{- define "prefixgate.discoveryNamespaces" -}}
{{- $namespaces := dig "discovery" "kubernetes" "namespaces" list .Values.config }}
{{- toJson (default (list .Release.Namespace) $namespaces) }}
{{- end }}

{{/*
The in-chart Redis of redis.deploy (state sync between replicas).
*/}}
{{- define "prefixgate.redisName" -}}
{{- printf "%s-redis" (include "prefixgate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The Redis's own selector labels: a name of its own, so that the gateway's Service and Deployment never select it.
*/}}
{{- define "prefixgate.redisSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-redis" (include "prefixgate.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- define "prefixgate.redisLabels" -}}
helm.sh/chart: {{ include "prefixgate.chart" . }}
{{ include "prefixgate.redisSelectorLabels" . }}
app.kubernetes.io/component: state-sync
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
terminationGracePeriodSeconds: long enough for the preStop sleep and then config.shutdown_grace_ms of draining,
plus a margin for the process to exit; computed from both unless set, and refused when set too short.
*/}}
{{- define "prefixgate.terminationGraceSeconds" -}}
{{- $drainSeconds := div (add (int (default 30000 .Values.config.shutdown_grace_ms)) 999) 1000 }}
{{- $needed := add (int .Values.preStopSleepSeconds) $drainSeconds }}
{{- $set := .Values.terminationGracePeriodSeconds }}
{{- if and (not (kindIs "invalid" $set)) (le (int $set) (int $needed)) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed preStopSleepSeconds + config.shutdown_grace_ms (%d s), or draining requests are killed" (int $set) (int $needed)) }}
{{- end }}
{{- if kindIs "invalid" $set }}{{ add $needed .Values.terminationGraceMarginSeconds }}{{ else }}{{ int $set }}{{ end }}
{{- end }}
