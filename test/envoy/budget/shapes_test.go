package budget

import (
	"fmt"

	"github.com/envoy-rls/envoy-rls/internal/testkit/envoytest"
)

// The two products' shapes, as they generate them for a cost, on one
// listener: the AI Gateway's token quota under /ai/ and Envoy Gateway's
// BackendTrafficPolicy cost under /eg/. A Lua filter stands in for what
// each puts in front of the rate-limit filter (the AI Gateway's ext_proc,
// an Envoy Gateway user's own filter): on the request it sets the AI
// Gateway's metadata (backend and model), on the response it reads the
// usage figure into dynamic metadata, from the JSON body's
// usage.total_tokens for the AI Gateway and from the upstream's
// tokensHeader for Envoy Gateway.
const (
	aiPath = "/ai/v1/chat/completions"
	egPath = "/eg/v1/chat/completions"

	// aiDomain is the AI Gateway route's RateLimitPerRoute domain; egDomain
	// the filter's domain as Envoy Gateway names it (namespace/gateway/listener).
	aiDomain = "ai-gateway"
	egDomain = "default/eg/http"
	// egRoute is Envoy Gateway's descriptor for the route (key and value
	// alike); egRule its descriptor for the rule's header match, here the
	// client's x-user-id (a Distinct match: one budget per value).
	egRoute = "httproute/default/llm/rule/0/match/0/llm_example_com"
	egRule  = "rule-0-match-0"
	// modelHeader names the model the Lua filter puts in the AI Gateway's
	// metadata (model_name_override), so each test run has its own budget.
	modelHeader = "x-model"
	userHeader  = "x-user-id"
)

// aiActions are the AI Gateway's descriptor actions: backend and model
// from its dynamic metadata, then the quota's generic_key.
const aiActions = `
                        - metadata: {descriptor_key: backend_name, metadata_key: {key: io.envoy.ai_gateway, path: [{key: ai_service_backend_name}]}, source: DYNAMIC}
                        - metadata: {descriptor_key: model_name, metadata_key: {key: io.envoy.ai_gateway, path: [{key: model_name_override}]}, source: DYNAMIC}
                        - generic_key: {descriptor_value: token-quota}`

// egActions are Envoy Gateway's: the route's generic_key, then the rule's
// header match.
const egActions = `
                        - generic_key: {descriptor_key: "` + egRoute + `", descriptor_value: "` + egRoute + `"}
                        - request_headers: {header_name: ` + userHeader + `, descriptor_key: ` + egRule + `}`

// shapesLua is the stand-in for the filters in front of the rate-limit
// filter.
const shapesLua = `
                  function envoy_on_request(h)
                    local m = h:streamInfo():dynamicMetadata()
                    m:set("io.envoy.ai_gateway", "ai_service_backend_name", "default/openai/route/llm/rule/0/ref/0")
                    m:set("io.envoy.ai_gateway", "model_name_override", h:headers():get("` + modelHeader + `") or "gpt-4o-mini")
                  end
                  function envoy_on_response(h)
                    local n = tonumber(h:headers():get("` + tokensHeader + `") or "")
                    -- body() waits for the whole body; objects taken before
                    -- it are out of scope after it.
                    local body = h:body()
                    local m = h:streamInfo():dynamicMetadata()
                    if n ~= nil then
                      m:set("example.usage", "total_tokens", n)
                    end
                    if body ~= nil and body:length() > 0 then
                      local t = string.match(body:getBytes(0, body:length()), '"total_tokens"%s*:%s*(%d+)')
                      if t ~= nil then
                        m:set("io.envoy.ai_gateway", "llm_total_token", tonumber(t))
                      end
                    end
                  end`

// shapesBootstrap is the Envoy both shapes run on; its clusters and
// listener are rewritten by startEnvoy.
func shapesBootstrap() []byte {
	return []byte(envoytest.IngressHead + `            - name: llm
              domains: ["*"]
              routes:
              # The AI Gateway: a request-time entry without hits_addend
              # (1 hit), and the same actions at stream done charging the
              # response's total tokens.
              - match: {path: "` + aiPath + `"}
                route: {cluster: llm, prefix_rewrite: /v1/chat/completions}
                typed_per_filter_config:
                  envoy.filters.http.ratelimit:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
                    domain: ` + aiDomain + `
                    rate_limits:
                    - actions:` + aiActions + `
                    - actions:` + aiActions + `
                      apply_on_stream_done: true
                      hits_addend: {format: "%DYNAMIC_METADATA(io.envoy.ai_gateway:llm_total_token)%"}
              # Envoy Gateway: the request-time entry checks only
              # (hits_addend 0), the stream-done one charges the response
              # cost from metadata.
              - match: {path: "` + egPath + `"}
                route: {cluster: llm, prefix_rewrite: /v1/chat/completions}
                typed_per_filter_config:
                  envoy.filters.http.ratelimit:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
                    rate_limits:
                    - actions:` + egActions + `
                      hits_addend: {number: 0}
                    - actions:` + egActions + `
                      apply_on_stream_done: true
                      hits_addend: {format: "%DYNAMIC_METADATA(example.usage:total_tokens)%"}
          http_filters:
          - name: envoy.filters.http.lua
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
              default_source_code:
                inline_string: |` + shapesLua + `
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: ` + egDomain + `
              failure_mode_deny: false
              disable_x_envoy_ratelimited_header: true
              enable_x_ratelimit_headers: DRAFT_VERSION_03
              timeout: 5s
              rate_limit_service: {transport_api_version: V3, grpc_service: {envoy_grpc: {cluster_name: envoy_rls}}}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
` + testClusters)
}

// budget is one token budget: B tokens per period of P seconds, counted
// with an algorithm.
type budget struct {
	Tokens    int64
	PeriodSec int
	Algorithm string
}

// limitYAML is the budget as a rule's rate_limit, marked cost: charge
// (a stream-done charge counts even past the limit).
func (b budget) limitYAML() string {
	return fmt.Sprintf("{unit: second, unit_multiplier: %d, requests_per_unit: %d, algorithm: %s, cost: charge}", b.PeriodSec, b.Tokens, b.Algorithm)
}

// shapesRules are the rule files for both shapes' domains, each budget
// per model (AI Gateway) or per user (Envoy Gateway). The reference reads
// the Envoy Gateway file as it is when the budget names no algorithm and
// cost (see referenceRules).
func shapesRules(b budget) map[string]string {
	return map[string]string{
		"ai.yaml": `domain: ` + aiDomain + `
descriptors:
  - key: backend_name
    descriptors:
      - key: model_name
        descriptors:
          - key: generic_key
            value: token-quota
            rate_limit: ` + b.limitYAML() + `
`,
		"eg.yaml": egRules(b.limitYAML()),
	}
}

// egRules is the Envoy Gateway domain's rule file with the given
// rate_limit, in the shape Envoy Gateway writes for the reference.
func egRules(limit string) string {
	return `domain: ` + egDomain + `
descriptors:
  - key: "` + egRoute + `"
    value: "` + egRoute + `"
    descriptors:
      - key: ` + egRule + `
        rate_limit: ` + limit + `
`
}

// shape is one of the two products' request shapes.
type shape struct {
	Name string
	Path string
	// RequestHits is what the request-time entry charges (AI Gateway: 1;
	// Envoy Gateway: 0, check only).
	RequestHits int64
	// Header makes a run's requests its own budget.
	Header func(run string) map[string]string
}

var (
	aiShape = shape{Name: "ai-gateway", Path: aiPath, RequestHits: 1,
		Header: func(run string) map[string]string { return map[string]string{modelHeader: run} }}
	egShape = shape{Name: "envoy-gateway", Path: egPath, RequestHits: 0,
		Header: func(run string) map[string]string { return map[string]string{userHeader: run} }}
)
