-- lean.lua applies the common call, every limit a plain fixed window, as
-- apply.lua would: the same KEYS, ARGV, reply and storage (apply.lua's
-- header documents them), for calls whose every limit has code 1, or
-- 1 + 64 with hits of at least 1 (consume, no burst, no take, no refund), a positive
-- limit and a positive period. The backend sends such calls here
-- (scriptCall.lean) and every other call to apply.lua; both scripts write
-- the same values, so a counter may go through either.
--
-- Why a second script: Redis's cost of a script call grows with the
-- script, not only with what the call runs. In isolation apply.lua (and
-- even a lean path inside it) costs Redis up to about twice this script's
-- CPU for the same one fixed-window limit (BENCHMARKS.md, issue 19), and
-- that is the call a per-user or per-route limit makes at every request.
-- The helpers both scripts need (divmod, ttlMs …) are written once, in
-- lua/shared.lua, which the backend writes into each at load.

-- __SHARED__: divmod, ceilDiv, windowMargin and ttlMs (lua/shared.lua,
-- written in at load: script.go)

-- apply.lua's load for a fixed window: the hash names the window holding
-- now, and the field's value is the count; an unreadable value reads as
-- no count.
local function loadCount(v, period, now)
  local c = tonumber(v)
  if c == nil then
    return 0, 0
  end
  local _, off = divmod(now, period)
  return now - off, c
end

-- apply.lua's stepFixedWindow without refunds (algo.stepFixedWindow):
-- returns the new window start and count, allowed, remaining, reset,
-- retry. The backend sends no check-only limit here (a probe,
-- algo.probe), so hits is at least 1, except for the report of an
-- admitting limit in a denied request (hits 0 below), whose state one
-- more hit fits: its probe and this step agree.
local function step(limit, period, t, c, now, hits)
  local _, off = divmod(now, period)
  local start, count = now - off, 0
  if t >= start and c > 0 then
    start, count = t, c
  end
  local reset = start + period - now
  if hits > limit then
    return start, count, false, 0, reset, -1
  end
  if count + hits > limit then
    return start, count, false, limit - count, reset, reset
  end
  count = count + hits
  return start, count, true, limit - count, reset, 0
end

-- The framing, checked before anything is applied: per request n (or -n
-- then now), then per limit code, limit, period and hits when the code
-- says so, then the n limits' fields (each key is a fixed window's hash,
-- as in apply.lua). Anything else is an error reply, so that nothing is
-- written.
local MALFORMED = 'ERR lean.lua: malformed arguments: want per request n (or -n and now), per key code 1 or 65, a positive limit and period, and hits of at least 1 after code 65, then the n fields, with n keys each'
local nargs, nkeys = #ARGV, #KEYS
local reqs, a, k = {}, 1, 0
while a <= nargs do
  local n, now = tonumber(ARGV[a]), 0
  a = a + 1
  if n ~= nil and n < 0 then
    n, now = -n, tonumber(ARGV[a])
    a = a + 1
  end
  if n == nil or now == nil or n < 1 or k + n > nkeys then
    return redis.error_reply(MALFORMED)
  end
  local r = {k, a, n, now, 0}
  reqs[#reqs + 1] = r
  for _ = 1, n do
    local code, limit, period = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    if (code ~= 1 and code ~= 65) or limit == nil or period == nil or limit <= 0 or period <= 0 then
      return redis.error_reply(MALFORMED)
    end
    a = a + 3
    if code == 65 then
      local hits = tonumber(ARGV[a])
      if hits == nil or hits < 1 then
        return redis.error_reply(MALFORMED)
      end
      a = a + 1
    end
  end
  -- The fields: strings, so any value will do.
  r[5] = a
  a = a + n
  if a - 1 > nargs then
    return redis.error_reply(MALFORMED)
  end
  k = k + n
end
if a - 1 ~= nargs or k ~= nkeys then
  return redis.error_reply(MALFORMED)
end

-- The requests in order, each seeing what the ones before it wrote (as
-- apply.lua). Per limit, lim holds limit, period, read start and count,
-- hits and the new start and count, flat: lim[8 * (i - 1) + 1 …].
local reply, serverNow, lim = {}, 0, {}
for _, r in ipairs(reqs) do
  local rk, b, n, now, fa = r[1], r[2], r[3], r[4], r[5]
  if now == 0 then
    if serverNow == 0 then
      local t = redis.call('TIME')
      serverNow = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    now = serverNow
  end
  local base = #reply
  reply[base + 1] = now
  reply[base + 2] = 1
  local allowed, failed = true, nil
  for i = 1, n do
    local code, limit, period, hits = tonumber(ARGV[b]), tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), 1
    b = b + 3
    if code == 65 then
      hits = tonumber(ARGV[b])
      b = b + 1
    end
    local v = redis.pcall('HGET', KEYS[rk + i], ARGV[fa + i - 1])
    local t, c = 0, 0
    if type(v) == 'table' then
      -- apply.lua's failed: 2 for WRONGTYPE, 3 for anything else.
      failed = 3
      if type(v.err) == 'string' and string.find(v.err, 'WRONGTYPE', 1, true) then
        failed = 2
      end
      break
    elseif v then
      t, c = loadCount(v, period, now)
    end
    local ns, nc, ok, remaining, reset, retry = step(limit, period, t, c, now, hits)
    allowed = allowed and ok
    local l = 8 * (i - 1)
    lim[l + 1], lim[l + 2], lim[l + 3], lim[l + 4], lim[l + 5], lim[l + 6], lim[l + 7] = limit, period, t, c, hits, ns, nc
    local o = base + 2 + 5 * (i - 1)
    reply[o + 1], reply[o + 2], reply[o + 3], reply[o + 4], reply[o + 5] = ok and 1 or 0, remaining, reset, retry, 0
  end
  if failed then
    for j = #reply, base + 2, -1 do
      reply[j] = nil
    end
    reply[base + 2] = failed
    for j = 1, 5 * n do
      reply[base + 2 + j] = 0
    end
  else
    if not allowed then
      reply[base + 2] = 0
    end
    for i = 1, n do
      local l, o = 8 * (i - 1), base + 2 + 5 * (i - 1)
      local limit, period, hits, ns, nc = lim[l + 1], lim[l + 2], lim[l + 5], lim[l + 6], lim[l + 7]
      if hits > 0 and reply[o + 1] == 1 then
        if allowed then
          -- apply.lua's commit: a consumed window has a count, so its
          -- hash's expiry (algo.expiryFixedWindow) is the window's end,
          -- > now, and apply.lua's windowMargin (the backend writes the
          -- bound in), set by the first writer of the window (NX).
          redis.call('HSET', KEYS[rk + i], ARGV[fa + i - 1], string.format('%.0f', nc))
          redis.call('PEXPIRE', KEYS[rk + i], ttlMs(ns + period - now + windowMargin(period)), 'NX')
        else
          local _, _, ok, remaining, reset, retry = step(limit, period, lim[l + 3], lim[l + 4], now, 0)
          reply[o + 1], reply[o + 2], reply[o + 3], reply[o + 4] = ok and 1 or 0, remaining, reset, retry
        end
      end
    end
  end
end
return reply
