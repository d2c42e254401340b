{{/*
The envoy-rls container's environment: each flag of `envoy-rls serve` as
its ENVOY_RLS_* twin.
*/}}
{{- define "envoy-rls.env" -}}
- name: ENVOY_RLS_GRPC_ADDR
  value: {{ printf ":%d" (int .Values.grpc.port) | quote }}
- name: ENVOY_RLS_HTTP_ADDR
  value: {{ printf ":%d" (int .Values.http.port) | quote }}
- name: ENVOY_RLS_GRPC_MAX_CONNECTION_AGE
  value: {{ .Values.grpc.maxConnectionAge | quote }}
- name: ENVOY_RLS_GRPC_MAX_CONNECTION_AGE_GRACE
  value: {{ .Values.grpc.maxConnectionAgeGrace | quote }}
- name: ENVOY_RLS_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: ENVOY_RLS_LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
- name: ENVOY_RLS_RESPONSE_HEADERS
  value: {{ .Values.responseHeaders | quote }}
- name: ENVOY_RLS_SHUTDOWN_DELAY
  value: {{ .Values.shutdown.delay | quote }}
- name: ENVOY_RLS_SHUTDOWN_TIMEOUT
  value: {{ .Values.shutdown.timeout | quote }}
- name: ENVOY_RLS_LEASE_TTL
  value: {{ .Values.lease.ttl | quote }}
- name: ENVOY_RLS_LEASE_HOT_RPS
  value: {{ .Values.lease.hotRps | quote }}
- name: ENVOY_RLS_LEASE_MAX_FRACTION
  value: {{ .Values.lease.maxFraction | quote }}
- name: ENVOY_RLS_EXPECTED_REPLICAS
  value: {{ .Values.expectedReplicas | int64 | quote }}
- name: ENVOY_RLS_MEMSTORE_MAX_KEYS
  value: {{ .Values.memstoreMaxKeys | int64 | quote }}
{{- if eq .Values.rules.source "xds" }}
- name: ENVOY_RLS_CONFIG_SOURCE
  value: xds
- name: ENVOY_RLS_XDS_SERVER
  value: {{ required "xds.server is required with rules.source xds" .Values.xds.server | quote }}
- name: ENVOY_RLS_XDS_NODE_ID
  value: {{ .Values.xds.nodeId | quote }}
{{- if .Values.xds.forceStart }}
- name: ENVOY_RLS_XDS_FORCE_START
  value: "true"
{{- end }}
{{- if .Values.xds.tls.enabled }}
- name: ENVOY_RLS_XDS_TLS
  value: "true"
{{- if .Values.xds.tls.secretName }}
- name: ENVOY_RLS_XDS_TLS_CA
  value: /etc/envoy-rls/xds-tls/ca.crt
{{- if .Values.xds.tls.clientCert }}
- name: ENVOY_RLS_XDS_TLS_CERT
  value: /etc/envoy-rls/xds-tls/tls.crt
- name: ENVOY_RLS_XDS_TLS_KEY
  value: /etc/envoy-rls/xds-tls/tls.key
{{- end }}
{{- end }}
{{- if .Values.xds.tls.san }}
- name: ENVOY_RLS_XDS_TLS_SAN
  value: {{ .Values.xds.tls.san | quote }}
{{- end }}
{{- end }}
{{- else if eq .Values.rules.source "file" }}
- name: ENVOY_RLS_CONFIG_DIR
  value: /etc/envoy-rls/config
{{- else }}
{{- fail (printf "rules.source %q: want file or xds" .Values.rules.source) }}
{{- end }}
{{- include "envoy-rls.redisEnv" . }}
{{- if .Values.grpc.tls.enabled }}
- name: ENVOY_RLS_GRPC_TLS_CERT
  value: /etc/envoy-rls/grpc-tls/tls.crt
- name: ENVOY_RLS_GRPC_TLS_KEY
  value: /etc/envoy-rls/grpc-tls/tls.key
{{- if .Values.grpc.tls.clientCA.enabled }}
- name: ENVOY_RLS_GRPC_TLS_CLIENT_CA
  value: /etc/envoy-rls/grpc-client-ca/{{ .Values.grpc.tls.clientCA.key }}
{{- end }}
{{- end }}
- name: ENVOY_RLS_DEBUG_ADDR
  value: {{ ternary .Values.debug.address "" .Values.debug.enabled | quote }}
{{- if and .Values.debug.enabled .Values.debug.adminToken.enabled }}
- name: ENVOY_RLS_ADMIN_TOKEN_FILE
  value: /etc/envoy-rls/admin/{{ .Values.debug.adminToken.key }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "envoy-rls.redisEnv" -}}
{{- $r := .Values.redis -}}
{{- if ne $r.mode "memory" }}
{{- if $r.urlSecret.name }}
- name: ENVOY_RLS_REDIS_URL
  valueFrom:
    secretKeyRef: {name: {{ $r.urlSecret.name | quote }}, key: {{ $r.urlSecret.key | quote }}}
{{- else }}
{{- if $r.passwordSecret.name }}
# Expanded into the URL below by Kubernetes; envoy-rls never reads it.
- name: RLS_REDIS_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ $r.passwordSecret.name | quote }}, key: {{ $r.passwordSecret.key | quote }}}
{{- end }}
- name: ENVOY_RLS_REDIS_URL
  value: {{ include "envoy-rls.redisURL" . | quote }}
{{- end }}
- name: ENVOY_RLS_REDIS_FAILURE_MODE
  value: {{ $r.failureMode | quote }}
- name: ENVOY_RLS_REDIS_TIMEOUT
  value: {{ $r.timeout | quote }}
{{- if $r.keyPrefix }}
- name: ENVOY_RLS_REDIS_KEY_PREFIX
  value: {{ $r.keyPrefix | quote }}
{{- end }}
{{- if and $r.tls.enabled $r.tls.secretName }}
- name: ENVOY_RLS_REDIS_TLS_CA
  value: /etc/envoy-rls/redis-tls/ca.crt
{{- if $r.tls.clientCert }}
- name: ENVOY_RLS_REDIS_TLS_CERT
  value: /etc/envoy-rls/redis-tls/tls.crt
- name: ENVOY_RLS_REDIS_TLS_KEY
  value: /etc/envoy-rls/redis-tls/tls.key
{{- end }}
{{- end }}
{{- end }}
{{- end -}}
