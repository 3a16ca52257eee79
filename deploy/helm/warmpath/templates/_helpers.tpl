{{/* Names, labels and small shared snippets of the warmpath chart. */}}

{{- define "warmpath.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* <release>-<chart>, or the release name alone when it already contains the chart name. */}}
{{- define "warmpath.fullname" -}}
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

{{- define "warmpath.router.fullname" -}}
{{- printf "%s-router" (include "warmpath.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "warmpath.controller.fullname" -}}
{{- printf "%s-controller" (include "warmpath.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "warmpath.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "warmpath.labels" -}}
helm.sh/chart: {{ include "warmpath.chart" . }}
app.kubernetes.io/name: {{ include "warmpath.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: warmpath
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels; the caller passes a dict: {ctx: ., component: router|controller}. */}}
{{- define "warmpath.selectorLabels" -}}
app.kubernetes.io/name: {{ include "warmpath.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "warmpath.componentLabels" -}}
{{ include "warmpath.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "warmpath.router.serviceAccountName" -}}
{{- if .Values.router.serviceAccount.create }}
{{- default (include "warmpath.router.fullname" .) .Values.router.serviceAccount.name }}
{{- else }}
{{- required "router.serviceAccount.name is required when router.serviceAccount.create is false" .Values.router.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "warmpath.controller.serviceAccountName" -}}
{{- if .Values.controller.serviceAccount.create }}
{{- default (include "warmpath.controller.fullname" .) .Values.controller.serviceAccount.name }}
{{- else }}
{{- required "controller.serviceAccount.name is required when controller.serviceAccount.create is false" .Values.controller.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "warmpath.leaseName" -}}
{{- default (include "warmpath.controller.fullname" .) .Values.controller.leaderElection.leaseName }}
{{- end }}

{{/* image: repository:tag, the tag defaulting to the chart's appVersion. Takes {image, ctx}. */}}
{{- define "warmpath.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) }}
{{- end }}

{{/* The router's configuration file: user config with listen/admin from router.ports. */}}
{{- define "warmpath.router.config" -}}
{{- $cfg := deepCopy (default (dict) .Values.router.config) }}
{{- $_ := set $cfg "listen" (printf "0.0.0.0:%v" .Values.router.ports.http) }}
{{- $_ := set $cfg "admin" (printf "0.0.0.0:%v" .Values.router.ports.admin) }}
{{- if and .Values.router.ports.endpointPicker (eq .Values.router.mode "deployment") }}
{{- $picker := deepCopy (default (dict) (get $cfg "endpoint_picker")) }}
{{- $_ := set $picker "listen" (printf "0.0.0.0:%v" .Values.router.ports.endpointPicker) }}
{{- if .Values.router.endpointPickerAuth.tokenSecret }}{{ $_ := set $picker "token_file" "/var/run/warmpath/picker-token/token" }}{{ end }}
{{- $_ := set $cfg "endpoint_picker" $picker }}
{{- end }}
{{- if and .Values.router.ports.peers (eq .Values.router.mode "deployment") }}
{{- $peers := deepCopy (default (dict) (get $cfg "peers")) }}
{{- /* The pod's own address (POD_IP, from the downward API; the router expands it): the file is
shared by every pod, and every interface would include loopback, open to the pod's other
containers whatever the NetworkPolicy says. */}}
{{- $_ := set $peers "listen" (printf "tcp://${POD_IP}:%v" .Values.router.ports.peers) }}
{{- if not (hasKey $peers "routers") }}{{ $_ := set $peers "routers" (list (printf "tcp://%s.%s.svc:%v" (include "warmpath.router.peersService" .) .Release.Namespace .Values.router.ports.peers)) }}{{ end }}
{{- if not (hasKey $peers "key_file") }}{{ $_ := set $peers "key_file" "/var/run/warmpath/peers-key/key" }}{{ end }}
{{- $_ := set $cfg "peers" $peers }}
{{- end }}
{{- if not (hasKey $cfg "pools") }}{{ $_ := set $cfg "pools" (list) }}{{ end }}
{{- if eq .Values.router.mode "deployment" }}
{{- $sessions := deepCopy (default (dict) (get $cfg "sessions")) }}
{{- if not (hasKey $sessions "key_file") }}{{ $_ := set $sessions "key_file" "/var/run/warmpath/session-key/key" }}{{ end }}
{{- $_ := set $cfg "sessions" $sessions }}
{{- /* Leaving: accepting for 5 s after SIGTERM (endpoints take a moment to drop the pod),
then draining for what is left of the grace period but 5 s. */}}
{{- $grace := int .Values.router.terminationGracePeriodSeconds }}
{{- $shutdown := deepCopy (default (dict) (get $cfg "shutdown")) }}
{{- if not (hasKey $shutdown "accept_ms") }}{{ $_ := set $shutdown "accept_ms" 5000 }}{{ end }}
{{- if not (hasKey $shutdown "drain_ms") }}{{ $_ := set $shutdown "drain_ms" (mul (max 1 (sub $grace 10)) 1000) }}{{ end }}
{{- if ge (add (int $shutdown.accept_ms) (int $shutdown.drain_ms)) (mul $grace 1000) }}
{{- fail (printf "router.config.shutdown: accept_ms + drain_ms (%v ms) must be shorter than router.terminationGracePeriodSeconds (%v s), or the kubelet kills open streams" (add (int $shutdown.accept_ms) (int $shutdown.drain_ms)) $grace) }}
{{- end }}
{{- $_ := set $cfg "shutdown" $shutdown }}
{{- if .Values.router.adminAuth.tokenSecret }}{{ $_ := set $cfg "admin_token_file" "/var/run/warmpath/admin-token/token" }}{{ end }}
{{- if .Values.router.tls.secretName }}{{ $_ := set $cfg "tls" (dict "cert_file" "/var/run/warmpath/tls/tls.crt" "key_file" "/var/run/warmpath/tls/tls.key") }}{{ end }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/* The headless Service whose name resolves to every router pod (peering). */}}
{{- define "warmpath.router.peersService" -}}
{{- printf "%s-peers" (include "warmpath.router.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The Secret holding the router replicas' shared session key. */}}
{{- define "warmpath.router.sessionKeySecret" -}}
{{- .Values.router.sessions.keySecret | default (printf "%s-session-key" (include "warmpath.router.fullname" .) | trunc 63 | trimSuffix "-") }}
{{- end }}

{{/* The Secret holding the router replicas' shared peers key (peering). */}}
{{- define "warmpath.router.peersKeySecret" -}}
{{- .Values.router.peers.keySecret | default (printf "%s-peers-key" (include "warmpath.router.fullname" .) | trunc 63 | trimSuffix "-") }}
{{- end }}

{{/* Namespaces the binaries watch, comma-separated (empty: all). */}}
{{- define "warmpath.watchNamespaces" -}}
{{- join "," .Values.rbac.watchNamespaces }}
{{- end }}

{{/*
Namespaces whose Secrets the controller and the router read (TenantPolicies' API keys):
rbac.secretNamespaces, else the older controller.secretNamespaces, else the release's.
*/}}
{{- define "warmpath.secretNamespaces" -}}
{{- $list := .Values.rbac.secretNamespaces | default .Values.controller.secretNamespaces }}
{{- if $list }}{{ toJson (uniq $list) }}{{ else }}{{ toJson (list .Release.Namespace) }}{{ end }}
{{- end }}

{{/* Pod anti-affinity preset merged with user affinity. Takes {ctx, component, preset, key, extra}. */}}
{{- define "warmpath.affinity" -}}
{{- $aff := deepCopy (default (dict) .extra) }}
{{- $term := dict "labelSelector" (dict "matchLabels" (include "warmpath.selectorLabels" (dict "ctx" .ctx "component" .component) | fromYaml)) "topologyKey" .key }}
{{- if eq .preset "soft" }}
{{- $_ := set $aff "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term))) }}
{{- else if eq .preset "hard" }}
{{- $_ := set $aff "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term)) }}
{{- end }}
{{- if $aff }}
affinity:
  {{- toYaml $aff | nindent 2 }}
{{- end }}
{{- end }}

{{/* PodDisruptionBudget spec body. Takes a pdb values map. */}}
{{- define "warmpath.pdbBudget" -}}
{{- if not (kindIs "invalid" .minAvailable) }}
minAvailable: {{ .minAvailable }}
{{- else }}
maxUnavailable: {{ .maxUnavailable }}
{{- end }}
{{- end }}

{{/* The routers' boundaries, given to the router and to the controller (whose statuses say
what the routers leave out): see router.shareModelsWith and the values after it. */}}
{{- define "warmpath.boundaryEnv" -}}
- name: WARMPATH_SHARE_MODELS_WITH
  value: {{ join "," .Values.router.shareModelsWith | quote }}
- name: WARMPATH_REPLICA_NETWORKS
  value: {{ join "," .Values.router.replicaNetworks | quote }}
- name: WARMPATH_REPLICA_HOSTNAMES
  value: {{ .Values.router.replicaHostnames | quote }}
- name: WARMPATH_TOKENIZER_ROOT
  value: {{ .Values.router.tokenizerRoot | quote }}
- name: WARMPATH_MAX_TENANT_PRIORITY
  value: {{ .Values.router.maxTenantPriority | quote }}
- name: WARMPATH_ROUTER_NAMESPACE
  value: {{ .Release.Namespace | quote }}
{{- end }}
