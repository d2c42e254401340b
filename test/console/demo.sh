#!/usr/bin/env bash
# Demo traffic for the live console, on the example rules that `make run`
# serves: ordinary clients under their limits, a login brute force that
# login_per_minute denies, the address blocked_ip always denies, and a
# scraper over per_ip. It is what docs/console.png shows.
#
#   make run                           # in one terminal
#   test/console/demo.sh               # in another: 40 s of traffic
#   open http://127.0.0.1:6070/console/
#
#   test/console/demo.sh --screenshot docs/console.png
#       the same, then a screenshot of the console (1280x800) taken by
#       headless Chromium ($CHROMIUM, default chromium)
#
# Environment: ENVOY_RLS (default bin/envoy-rls), ADDR (the gRPC address,
# default localhost:8081), CONSOLE (default http://127.0.0.1:6070/console/),
# SECONDS_OF_TRAFFIC (default 40), SIZE (the screenshot's window,
# default 1280,800). Every call goes to loopback; the loop
# is bounded in time. Exits 2 when the server does not answer.
set -euo pipefail

rls=${ENVOY_RLS:-bin/envoy-rls}
addr=${ADDR:-localhost:8081}
console=${CONSOLE:-http://127.0.0.1:6070/console/}
duration=${SECONDS_OF_TRAFFIC:-40}
size=${SIZE:-1280,800}
shot=""
if [[ "${1:-}" == "--screenshot" ]]; then
  shot=${2:?--screenshot wants a file name}
fi

# check asks for one decision on the edge domain; an OVER_LIMIT (exit 1)
# is what the demo wants, an error (exit 2) stops it.
check() {
  local code=0
  "$rls" check --addr "$addr" --domain edge "$@" >/dev/null 2>&1 || code=$?
  if ((code == 2)); then
    echo "demo.sh: envoy-rls check --addr $addr failed: is \`make run\` serving?" >&2
    exit 2
  fi
}

# traffic sends the demo's requests for $1 seconds, about 15 a round.
traffic() {
  local end=$((SECONDS + $1)) round=0
  while ((SECONDS < end)); do
    round=$((round + 1))
    # Ordinary clients, well under per_ip (50 a second).
    for i in 10 11 12 13 14 15; do check -d remote_address=203.0.113.$i; done
    # A login brute force: login_per_minute allows 5 a minute per address.
    for _ in 1 2 3; do check -d generic_key=login,remote_address=198.51.100.23; done
    check -d generic_key=login,remote_address=198.51.100.42
    ((round % 3 == 0)) && check -d generic_key=login,remote_address=203.0.113.10
    # The address blocked_ip denies every time.
    check -d remote_address=192.0.2.66
    # A scraper: 80 hits a request, faster than per_ip refills (50 a second).
    check --hits 80 -d remote_address=203.0.113.200
    sleep 0.3
  done
}

check -d remote_address=203.0.113.10 # fails fast when nothing serves
if [[ -z "$shot" ]]; then
  traffic "$duration"
  exit 0
fi

# The screenshot is taken while the traffic still runs, so that the
# per-second columns show it.
traffic $((duration + 8)) &
traffic_pid=$!
sleep "$duration"
# Headless, with a new empty profile and the background networking off:
# it reaches nothing but the loopback console. The page polls every
# second; the virtual time budget lets it fill in before the shot.
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"${CHROMIUM:-chromium}" --headless --no-sandbox --disable-gpu --disable-background-networking \
  --disable-component-update --disable-sync --no-first-run --user-data-dir="$profile" \
  --hide-scrollbars --window-size="$size" --virtual-time-budget=4000 \
  --screenshot="$shot" "$console" >/dev/null 2>&1
echo "demo.sh: wrote $shot"
wait "$traffic_pid"
