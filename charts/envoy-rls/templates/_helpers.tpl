{{/* The name of every object: the release's, unless it already says envoy-rls. */}}
{{- define "envoy-rls.fullname" -}}
{{- if contains "envoy-rls" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-envoy-rls" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "envoy-rls.selectorLabels" -}}
app.kubernetes.io/name: envoy-rls
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "envoy-rls.labels" -}}
{{ include "envoy-rls.selectorLabels" . }}
app.kubernetes.io/part-of: envoy-rls
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The rules ConfigMap the pods mount. */}}
{{- define "envoy-rls.rulesConfigMap" -}}
{{- .Values.rules.existingConfigMap | default (printf "%s-rules" (include "envoy-rls.fullname" .)) -}}
{{- end -}}

{{/* Istio's cluster name for the Service's gRPC port, and its authority. */}}
{{- define "envoy-rls.authority" -}}
{{- printf "%s.%s.svc.cluster.local" (include "envoy-rls.fullname" .) .Release.Namespace -}}
{{- end -}}
{{- define "envoy-rls.cluster" -}}
{{- printf "outbound|%d||%s" (int .Values.grpc.port) (include "envoy-rls.authority" .) -}}
{{- end -}}

{{/*
The Redis URL built from redis.*: scheme by mode and TLS, the password as
$(RLS_REDIS_PASSWORD), which Kubernetes expands from the env var
defined before it.
*/}}
{{- define "envoy-rls.redisURL" -}}
{{- $r := .Values.redis -}}
{{- if not $r.addresses }}{{ fail "redis.addresses: at least one host:port is required" }}{{ end -}}
{{- $scheme := "redis" -}}
{{- if $r.tls.enabled }}{{ $scheme = "rediss" }}{{ end -}}
{{- if eq $r.mode "sentinel" }}{{ $scheme = printf "%s+sentinel" $scheme }}
{{- else if eq $r.mode "cluster" }}{{ $scheme = printf "%s+cluster" $scheme }}
{{- else if ne $r.mode "standalone" }}{{ fail (printf "redis.mode %q: want standalone, sentinel, cluster or memory" $r.mode) }}
{{- end -}}
{{- if and (eq $r.mode "standalone") (gt (len $r.addresses) 1) }}{{ fail "redis.addresses: standalone takes one address" }}{{ end -}}
{{- $auth := "" -}}
{{- if $r.passwordSecret.name }}{{ $auth = printf "%s:$(RLS_REDIS_PASSWORD)@" $r.username }}
{{- else if $r.username }}{{ $auth = printf "%s@" $r.username }}{{ end -}}
{{- $path := "" -}}
{{- if eq $r.mode "sentinel" }}{{ $path = printf "/%s/%d" (required "redis.sentinelMaster is required for sentinel" $r.sentinelMaster) (int $r.db) }}
{{- else if eq $r.mode "standalone" }}{{ $path = printf "/%d" (int $r.db) }}{{ end -}}
{{- printf "%s://%s%s%s" $scheme $auth (join "," $r.addresses) $path -}}
{{- end -}}

{{/*
The labels of the gateway pods istio.gateway.kind names: istioctl's default
profile labels them istio: ingressgateway, Istio's gateway Helm chart
istio: ingress, and Istio labels the pods it deploys for a Gateway API
Gateway with the Gateway's name.
*/}}
{{- define "envoy-rls.gatewayLabels" -}}
{{- $g := .Values.istio.gateway -}}
{{- if eq $g.kind "istioctl" -}}
istio: ingressgateway
{{- else if eq $g.kind "helm" -}}
istio: ingress
{{- else if eq $g.kind "gatewayAPI" -}}
gateway.networking.k8s.io/gateway-name: {{ required "istio.gateway.gatewayName is required for kind gatewayAPI" $g.gatewayName | quote }}
{{- else if eq $g.kind "custom" -}}
{{- if not $g.selector }}{{ fail "istio.gateway.selector is required for kind custom" }}{{ end -}}
{{- toYaml $g.selector -}}
{{- else -}}
{{- fail (printf "istio.gateway.kind %q: want istioctl, helm, gatewayAPI or custom" $g.kind) -}}
{{- end -}}
{{- end -}}

{{/* The rate-limit filter an EnvoyFilter inserts before the router; . is istio.gateway or istio.sidecar with root. */}}
{{- define "envoy-rls.rateLimitFilter" -}}
{{- $f := .f -}}
name: envoy.filters.http.ratelimit
typed_config:
  "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
  domain: {{ $f.domain | quote }}
  # Room for a networked Redis and a cold connection; a slower answer
  # counts as a failure.
  timeout: {{ $f.timeout }}
  # false: fail open, so an envoy-rls outage does not become a site outage.
  failure_mode_deny: {{ $f.failureModeDeny }}
  {{- if $f.rateLimitedAsResourceExhausted }}
  # A limited gRPC call gets RESOURCE_EXHAUSTED, not UNAVAILABLE (which
  # gRPC clients retry, into the limit).
  rate_limited_as_resource_exhausted: true
  {{- end }}
  enable_x_ratelimit_headers: DRAFT_VERSION_03
  rate_limit_service:
    transport_api_version: V3
    grpc_service:
      envoy_grpc:
        cluster_name: {{ include "envoy-rls.cluster" .root | quote }}
        authority: {{ include "envoy-rls.authority" .root }}
{{- end -}}
