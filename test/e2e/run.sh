#!/usr/bin/env bash
# End-to-end check through a real Envoy. Builds envoy-rls from the
# repository's Dockerfile, starts test/e2e/docker-compose.yaml (Envoy, Redis,
# envoy-rls, an echo upstream), sends requests through Envoy and checks the
# 429s and the rate-limit headers, then tears the stack down.
#
# Needs Docker with the compose plugin (or docker-compose) and curl:
#
#   test/e2e/run.sh           run the checks
#   KEEP=1 test/e2e/run.sh    leave the stack running afterwards
#
# Exits 0 when every check passed, 1 when one failed, 2 when a tool is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
compose_file="$here/docker-compose.yaml"
project=envoy-rls-e2e
envoy_url=http://127.0.0.1:10000
admin_url=http://127.0.0.1:9901
rls_url=http://127.0.0.1:8080
headers_file=$(mktemp)

passed=0
failed=0

log() { printf '%s\n' "$*" >&2; }
pass() { passed=$((passed + 1)); log "ok   - $1"; }
fail() { failed=$((failed + 1)); log "FAIL - $1"; }

need() {
  if ! command -v "$1" >/dev/null 2>&1; then
    log "e2e: $1 is required"
    exit 2
  fi
}

compose() {
  if docker compose version >/dev/null 2>&1; then
    docker compose -p "$project" -f "$compose_file" "$@"
  elif command -v docker-compose >/dev/null 2>&1; then
    docker-compose -p "$project" -f "$compose_file" "$@"
  else
    log "e2e: neither 'docker compose' nor docker-compose is available"
    exit 2
  fi
}

cleanup() {
  local status=$?
  rm -f "$headers_file"
  if [ "$status" -ne 0 ] || [ "$failed" -ne 0 ]; then
    compose logs --no-color --tail=100 >&2 || true
  fi
  if [ -z "${KEEP:-}" ]; then
    compose down -v --remove-orphans >/dev/null 2>&1 || true
  fi
}

# request METHOD PATH [CURL_ARGS...] prints the status code of a request
# through Envoy (000 when it got no answer) and keeps the response headers
# for header().
request() {
  local method=$1 path=$2
  shift 2
  : >"$headers_file"
  curl -sS -o /dev/null -D "$headers_file" -w '%{http_code}' -X "$method" "$@" "$envoy_url$path" || true
}

# header NAME prints the value of header NAME (any case) of the last request.
header() {
  awk -v name="$1" '
    BEGIN { name = tolower(name) }
    {
      line = $0
      sub(/\r$/, "", line)
      i = index(line, ":")
      if (i > 0 && tolower(substr(line, 1, i - 1)) == name) {
        v = substr(line, i + 1)
        sub(/^[ \t]+/, "", v)
        print v
        exit
      }
    }' "$headers_file"
}

# wait_for URL WHAT polls URL until it answers 2xx, for at most 90 seconds.
wait_for() {
  local i
  for i in $(seq 1 90); do
    if curl -fsS -o /dev/null "$1" 2>/dev/null; then
      return 0
    fi
    sleep 1
  done
  log "e2e: $2 did not come up at $1"
  return 1
}

# expect_status WHAT WANT GOT
expect_status() {
  if [ "$3" = "$2" ]; then
    pass "$1: status $3"
  else
    fail "$1: status $3, want $2"
  fi
}

# expect_header WHAT NAME checks that the last response has header NAME.
expect_header() {
  local value
  value=$(header "$2")
  if [ -n "$value" ]; then
    pass "$1: $2: $value"
  else
    fail "$1: no $2 header"
  fi
}

need docker
need curl
trap cleanup EXIT

log "e2e: building and starting the stack"
compose down -v --remove-orphans >/dev/null 2>&1 || true
compose up -d --build
wait_for "$rls_url/readyz" "envoy-rls"
wait_for "$envoy_url/" "Envoy"

# The image: validate subcommand and stamped version.
if compose run --rm --no-deps envoy-rls validate /etc/envoy-rls/config >/dev/null; then
  pass "envoy-rls validate accepts examples/config"
else
  fail "envoy-rls validate rejects examples/config"
fi
version=$(compose run --rm --no-deps envoy-rls version)
case $version in
  *e2e*) pass "version is stamped: $version" ;;
  *) fail "version is not stamped: $version" ;;
esac

# An ordinary request passes and carries the rate-limit headers: Envoy's
# X-RateLimit-* (enable_x_ratelimit_headers) and envoy-rls's draft fields.
status=$(request GET /)
expect_status "GET /" 200 "$status"
expect_header "GET /" x-ratelimit-limit
expect_header "GET /" x-ratelimit-remaining
expect_header "GET /" ratelimit-policy

# Login attempts: 5 per minute per client IP (login_per_minute). The five
# pass, the sixth is refused with 429 and says when to retry.
for i in 1 2 3 4 5; do
  status=$(request POST /api/login)
  expect_status "login $i of 5" 200 "$status"
done
status=$(request POST /api/login)
expect_status "login 6 (over login_per_minute)" 429 "$status"
expect_header "login 6" x-envoy-ratelimited
expect_header "login 6" retry-after
remaining=$(header x-ratelimit-remaining)
if [ "$remaining" = "0" ]; then
  pass "login 6: x-ratelimit-remaining: 0"
else
  fail "login 6: x-ratelimit-remaining: '$remaining', want 0"
fi

# The login limit is the login route's alone: other paths still pass.
status=$(request GET /api/orders -H 'x-user-id: e2e-user')
expect_status "GET /api/orders after the login limit" 200 "$status"

# Envoy counted the refusal as an over-limit answer from envoy-rls.
over=$(curl -fsS "$admin_url/stats?filter=ratelimit.over_limit" | awk -F': ' '/^cluster\.echo\.ratelimit\.over_limit:/ { print $2 }')
if [ "${over:-0}" -ge 1 ]; then
  pass "Envoy stat cluster.echo.ratelimit.over_limit = $over"
else
  fail "Envoy stat cluster.echo.ratelimit.over_limit = '${over:-}', want >= 1"
fi

# envoy-rls exports Prometheus metrics.
if curl -fsS "$rls_url/metrics" | grep -q '^# HELP '; then
  pass "envoy-rls /metrics"
else
  fail "envoy-rls /metrics has no metrics"
fi

# failure_mode_deny is false: with envoy-rls down, Envoy lets requests through.
compose stop envoy-rls >/dev/null
status=$(request GET /)
expect_status "GET / with envoy-rls stopped (fail open)" 200 "$status"
compose start envoy-rls >/dev/null
wait_for "$rls_url/readyz" "envoy-rls (restarted)"

log "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
