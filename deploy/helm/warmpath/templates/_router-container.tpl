{{/* The router container, shared by the Deployment and the sidecar snippet. */}}
{{- define "warmpath.router.container" -}}
- name: router
  image: {{ include "warmpath.image" (dict "image" .Values.router.image "ctx" .) }}
  imagePullPolicy: {{ .Values.router.image.pullPolicy }}
  args:
    - --config
    - /etc/warmpath/router.yaml
    {{- if .Values.router.kubernetes }}
    - --kubernetes
    {{- end }}
    {{- range .Values.router.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  env:
    - name: RUST_LOG
      value: {{ .Values.router.logLevel | quote }}
    - name: WARMPATH_WATCH_NAMESPACES
      value: {{ include "warmpath.watchNamespaces" . | quote }}
    - name: WARMPATH_SECRET_NAMESPACES
      value: {{ include "warmpath.secretNamespaces" . | fromJsonArray | join "," | quote }}
    {{- include "warmpath.boundaryEnv" . | nindent 4 }}
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    - name: POD_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    {{- with .Values.router.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: http
      containerPort: {{ .Values.router.ports.http }}
      protocol: TCP
    - name: admin
      containerPort: {{ .Values.router.ports.admin }}
      protocol: TCP
    {{- if and .Values.router.ports.endpointPicker (eq .Values.router.mode "deployment") }}
    - name: grpc-ext-proc
      containerPort: {{ .Values.router.ports.endpointPicker }}
      protocol: TCP
    {{- end }}
    {{- if and .Values.router.ports.peers (eq .Values.router.mode "deployment") }}
    - name: peers
      containerPort: {{ .Values.router.ports.peers }}
      protocol: TCP
    {{- end }}
  startupProbe:
    httpGet:
      path: /healthz
      port: admin
    periodSeconds: {{ .Values.router.probes.startup.periodSeconds }}
    failureThreshold: {{ .Values.router.probes.startup.failureThreshold }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: admin
    {{- toYaml .Values.router.probes.liveness | nindent 4 }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: admin
    {{- toYaml .Values.router.probes.readiness | nindent 4 }}
  resources:
    {{- toYaml .Values.router.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.containerSecurityContext | nindent 4 }}
  volumeMounts:
    - name: warmpath-router-config
      mountPath: /etc/warmpath
      readOnly: true
    - name: warmpath-tmp
      mountPath: /tmp
    {{- if eq .Values.router.mode "deployment" }}
    - name: warmpath-session-key
      mountPath: /var/run/warmpath/session-key
      readOnly: true
    {{- if .Values.router.ports.peers }}
    - name: warmpath-peers-key
      mountPath: /var/run/warmpath/peers-key
      readOnly: true
    {{- end }}
    {{- if and .Values.router.ports.endpointPicker .Values.router.endpointPickerAuth.tokenSecret }}
    - name: warmpath-picker-token
      mountPath: /var/run/warmpath/picker-token
      readOnly: true
    {{- end }}
    {{- if .Values.router.adminAuth.tokenSecret }}
    - name: warmpath-admin-token
      mountPath: /var/run/warmpath/admin-token
      readOnly: true
    {{- end }}
    {{- if .Values.router.tls.secretName }}
    - name: warmpath-tls
      mountPath: /var/run/warmpath/tls
      readOnly: true
    {{- end }}
    {{- end }}
    {{- with .Values.router.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{/* The P/D sidecar container (router.sidecar.pd.enabled): prefill elsewhere, decode here. */}}
{{- define "warmpath.router.pdSidecarContainer" -}}
{{- $pd := .Values.router.sidecar.pd -}}
- name: warmpath-pd-sidecar
  image: {{ include "warmpath.image" (dict "image" .Values.router.image "ctx" .) }}
  imagePullPolicy: {{ .Values.router.image.pullPolicy }}
  args:
    - sidecar
    - --listen
    - {{ printf "0.0.0.0:%v" $pd.port | quote }}
    - --admin
    - {{ printf "0.0.0.0:%v" $pd.adminPort | quote }}
    - --engine
    - {{ $pd.engine | quote }}
    - --on-prefill-failure
    - {{ $pd.onPrefillFailure | quote }}
    {{- range $pd.prefillAllow }}
    - --prefill-allow
    - {{ . | quote }}
    {{- end }}
    {{- range $pd.prefillHosts }}
    - --prefill-host
    - {{ . | quote }}
    {{- end }}
    {{- range $pd.prefillPorts }}
    - --prefill-port
    - {{ . | quote }}
    {{- end }}
    {{- range $pd.enginePaths }}
    - --engine-path
    - {{ . | quote }}
    {{- end }}
    {{- range .Values.router.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  env:
    - name: RUST_LOG
      value: {{ .Values.router.logLevel | quote }}
    {{- with .Values.router.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: pd-http
      containerPort: {{ $pd.port }}
      protocol: TCP
    - name: pd-admin
      containerPort: {{ $pd.adminPort }}
      protocol: TCP
  livenessProbe:
    httpGet:
      path: /healthz
      port: pd-admin
    {{- toYaml .Values.router.probes.liveness | nindent 4 }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: pd-admin
    {{- toYaml .Values.router.probes.readiness | nindent 4 }}
  resources:
    {{- toYaml .Values.router.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.containerSecurityContext | nindent 4 }}
{{- end }}
