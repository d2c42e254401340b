#!/usr/bin/env bash
# End-to-end check through a real Envoy. Builds envoy-rls from the
# repository's Dockerfile, starts test/e2e/docker-compose.yaml (Envoy, Redis,
# envoy-rls, an echo upstream), checks the image, runs the shared checks of
# test/envoy/checks through Envoy (the list the native Envoy tests run too:
# 429s, rate-limit headers, stats, failing open), then tears the stack down.
#
# Needs Docker with the compose plugin (or docker-compose), curl and Go:
#
#   test/e2e/run.sh           run the checks
#   KEEP=1 test/e2e/run.sh    leave the stack running afterwards
#
# Exits 0 when every check passed, 1 when one failed, 2 when a tool is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
compose_file="$here/docker-compose.yaml"
project=envoy-rls-e2e
envoy_url=http://127.0.0.1:10000
admin_url=http://127.0.0.1:9901
rls_url=http://127.0.0.1:8080

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
  if [ "$status" -ne 0 ] || [ "$failed" -ne 0 ]; then
    compose logs --no-color --tail=100 >&2 || true
  fi
  if [ -z "${KEEP:-}" ]; then
    compose down -v --remove-orphans >/dev/null 2>&1 || true
  fi
}

# envoy_checks PHASE runs one phase of the shared checks against the
# published ports; it prints a line per check.
envoy_checks() {
  (cd "$repo" && go run ./test/envoy/checks/cmd/envoy-checks --phase "$1" \
    --envoy "$envoy_url" --admin "$admin_url" --rls "$rls_url")
}

# wait_for URL WHAT polls URL until it answers 2xx, for at most 90 seconds.
wait_for() {
  for _ in $(seq 1 90); do
    if curl -fsS -o /dev/null "$1" 2>/dev/null; then
      return 0
    fi
    sleep 1
  done
  log "e2e: $2 did not come up at $1"
  return 1
}

need docker
need curl
need go
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

# The shared checks (test/envoy/checks; the native Envoy tests of
# test/envoy/e2e run the same list): requests through Envoy, its stats and
# envoy-rls's metrics with the whole stack up ...
if envoy_checks up; then
  pass "shared checks, phase up"
else
  fail "shared checks, phase up"
fi

# ... and, with envoy-rls stopped, Envoy failing open (failure_mode_deny:
# false).
compose stop envoy-rls >/dev/null
if envoy_checks rls-stopped; then
  pass "shared checks, phase rls-stopped"
else
  fail "shared checks, phase rls-stopped"
fi
compose start envoy-rls >/dev/null
wait_for "$rls_url/readyz" "envoy-rls (restarted)"

log "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
