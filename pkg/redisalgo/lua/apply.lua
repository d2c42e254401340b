-- apply.lua evaluates the rate limits of one or more requests, each all or
-- nothing. It is algo.ApplyAll (pkg/algo) line by line: each function names
-- the Go function it mirrors and uses the same variable names, and a
-- differential test holds both to identical decisions and state.
--
-- One call carries one request, or several that the backend merged into
-- one script call (requests sharing a round trip and a hash slot); they are
-- applied in order, each seeing what the ones before it wrote.
--
-- KEYS      the keys of request 1's limits, then request 2's, and so on
--           (one key per limit; a fixed window's is the hash of its
--           window, which other limits may share, the others distinct
--           within a request)
-- ARGV      per request: a header, n (its number of limits) when it is
--           evaluated at the server's TIME, which production uses, or -n
--           then now in Unix µs (a given now serves tests and refunds that
--           must happen at the time their consumption did); then per limit
--           code, limit, period µs, then burst if the code says so (else
--           0 = limit; for sliding_window it is the sub-window count N,
--           algo.Policy.SubWindows, sent when above 1), then hits if the
--           code says so (else 1; 0 = check only). code = algorithm (1 fixed_window, 2 sliding_window,
--           3 sliding_log, 4 token_bucket, 5 gcra) + 8 × mode (0 consume,
--           1 refund, 2 take: hits is the most to consume,
--           algo.Check.Take, 3 cancel: a refund of a reservation,
--           algo.Check.ReservedAt) + 32 when burst follows + 64 when hits
--           follows + 128 when one more argument follows hits: max_delay
--           µs of a consume in queue mode (algo.Check.MaxDelay), or the
--           reserved time of a cancel; + 256 makes a consume a charge
--           (algo.Check.Charge: counted even when it does not fit, and
--           whatever the request's other limits decide). After the request's limits come
--           the fields of its fixed_window limits, in order: each one's
--           field in its hash (redisalgo.AppendField). The common request
--           (one limit, one hit, no burst, at TIME) is 5 arguments: Redis
--           and Lua pay for each one, and at moderate load a script call
--           carries one request.
-- Reply     per request: now, status, then per limit: allowed, remaining
--           (negative: overdrawn by that much), reset_after µs,
--           retry_after µs (-1: never), granted (what an
--           allowed take consumed, or a cancel gave back, else 0;
--           algo.Decision has their meaning). An allowed limit's
--           retry_after is its algo.Decision.Delay: 0 unless the request
--           queued (reserved) to pass that many µs after now. status is
--           allowed_all (0 or 1), or 2 when a key of the request holds
--           another type (WRONGTYPE), 3 for any other error; a failed
--           request's limits read 0, and only that request fails.
-- Needs Redis 7.0 or later (PEXPIRE … NX; ZRANGE … BYSCORE is 6.2).
--
-- First every limit is decided without writing; then, if every limit that
-- is not a refund allowed, the consuming limits are written. Refunds and
-- charges are always written; check-only limits never are.
--
-- Numbers: Lua numbers are doubles, exact for integers below 2^53, and
-- algo.Policy.Validate keeps every intermediate below that. Numbers are never
-- turned into strings with tostring or `..`, which keep 14 digits: they go to
-- redis.call, which writes integers exactly, or back as integer replies. The
-- strings built from numbers (a sorted-set member, every state value) use
-- string.format with %.0f, never %d: %.0f prints the double itself in full,
-- without exponent, so every integer below 2^53 comes out exact, whereas
-- Lua 5.1's %d first casts to a C long, whose width depends on the build.
-- Only integers are stored.
--
-- Storage, one key per limit (the fields of algo.State), each a string but
-- the sliding log's and the fixed window's; numbers in decimal, so that one
-- GET reads a state and one SET … PX writes it with its expiry:
--   fixed_window    hash field "<c>"   the count alone, in a field of the
--                                      hash of its window (the name ends
--                                      in the window's index modulo 36^4,
--                                      redisalgo.AppendCounterHash), so a
--                                      field is the state of one window,
--                                      read at the start of the window
--                                      holding now, and Redis's HINCRBY
--                                      applies a lone hit without this
--                                      script (the backend's plain calls);
--                                      a count above the limit is one such
--                                      call's denied hit not yet given
--                                      back. The hash expires at the
--                                      window's end and windowMargin, set
--                                      by its first writer (PEXPIRE NX)
--   sliding_window  "<i><c><p><n><m>"  i = current window index, c = its
--                                      count, p = the previous count, n
--                                      and m = c's and p's digit counts
--   sliding_window  "<h>:<w><c0><c1>…"  with N ≥ 2 sub-windows: h = the
--     with N ≥ 2      absolute index of the current sub-window (algo.subAt)
--                     in base 36, w (1-9) the digits per count, then c0 =
--                     its count, c1 the one before it … (at most N+1, each
--                     in w base-36 digits, trailing zeros dropped): a busy
--                     1 s window of 200 in 30 sub-windows is
--                     "or5ejno:17777777777777777777777777777777", 40 bytes,
--                     which Redis keeps inside its object (embstr ≤ 44)
--   sliding_log     zset  one member "<time>:<n>" per hit, score = time; n
--                         numbers the hits of one µs (six digits, so members
--                         of equal score sort by n)
--   token_bucket    "<t>" when f = 0, else "<t>:<f>": TAT = t + f/limit µs
--   gcra            the same value as token_bucket (f = 0 whenever period
--                   is a multiple of limit)
-- A sliding_window value is packed into one integer because Redis keeps a
-- value that reads as a 64-bit integer in the 16-byte object itself (what
-- envoyproxy/ratelimit's INCRBY counters, a fixed_window's count and a
-- whole token_bucket TAT get), whereas "<start µs>:<count>" was a 48-byte
-- string: 32 bytes a key (BENCHMARKS.md, "Redis memory per key"). So the
-- window is stored as its index, a 10-digit number at a 1 s period, and a
-- count of 0 as no digits (n or m = 0); the trailing length digits find
-- the counts from the end: 3 hits in window 5 after 10 in the one before
-- are "531012". A count of 10 digits or more (or a negative one) does not
-- fit one length digit: such a state is "<i>:<c>:<p>" instead, and a
-- value with ':' reads so. The period is part of the key, so the index
-- always converts back to the µs of algo.State with the period it was
-- written with. A packed value that is no 64-bit integer to Redis (more
-- than 19 digits, say, at a period of a few µs) stays a string there,
-- longer but read the same way.
-- Every written key expires after algo.Expiry rounded up to ms; a state
-- whose Expiry is 0 is deleted, but for a fixed window's count, which is
-- set to 0 where it exists (deleting a hash's last field would delete the
-- hash, and a plain HINCRBY would recreate it without an expiry). Keeping
-- a key longer is harmless: a state past its Expiry decides like no key.

local SLIDING_STEPS = 1048576 -- algo.slidingSteps, 2^20

-- __SHARED__: divmod, ceilDiv, windowMargin and ttlMs (lua/shared.lua,
-- written in at load: script.go)

-- algo.Never
local NEVER = -1

-- algo.never: returns allowed, remaining, reset, retry.
local function never(reset)
  return false, 0, reset, NEVER
end

-- algo.windowStart
local function windowStart(now, period)
  local _, off = divmod(now, period)
  return now - off
end

-- algo.blocked: reset is the end of the period-aligned window.
local function blocked(period, now, refund)
  local reset = 0
  if period > 0 then
    reset = windowStart(now, period) + period - now
  end
  if refund then
    return true, 0, reset, 0
  end
  return never(reset)
end

-- algo.stepFixedWindow
local function stepFixedWindow(limit, period, s, now, hits, refund)
  local start = windowStart(now, period)
  local count = 0
  if s.t >= start and s.c > 0 then
    start, count = s.t, s.c
  end
  if refund then
    count = math.max(count - hits, 0)
    hits = 0
  end
  local ns = {t = start, c = count}
  local reset = start + period - now
  if hits > limit then
    return ns, never(reset)
  end
  if count + hits > limit then
    return ns, false, limit - count, reset, reset
  end
  count = count + hits
  ns.c = count
  return ns, true, limit - count, reset, 0
end

-- algo.expiryFixedWindow
local function expiryFixedWindow(period, s, now)
  if s.c <= 0 then
    return 0
  end
  return s.t + period - now
end

-- algo.slidingQuantum
local function slidingQuantum(period)
  local step = ceilDiv(period, SLIDING_STEPS)
  local steps = divmod(period, step)
  return step, steps
end

-- algo.slidingWait
local function slidingWait(limit, period, start, curr, prev, hits, step, steps)
  local need = limit - curr - hits
  if need >= 0 and prev > 0 then
    local fit = divmod(need * steps, prev)
    return start + period - fit * step
  end
  need = limit - hits
  if curr <= 0 then
    return start + period
  end
  local fit = divmod(need * steps, curr)
  if fit >= steps then
    return start + period
  end
  return start + 2 * period - fit * step
end

-- algo.stepSlidingWindow
local function stepSlidingWindow(limit, period, s, now, hits, refund)
  local start = windowStart(now, period)
  local curr, prev = 0, 0
  if s.t >= start and (s.c > 0 or s.p > 0) then
    start, curr, prev = s.t, math.max(s.c, 0), math.max(s.p, 0)
  elseif s.t == start - period then
    prev = math.max(s.c, 0)
  end
  local rem = math.min(start + period - now, period)
  local step, steps = slidingQuantum(period)
  local remSteps = math.min(ceilDiv(rem, step), steps)
  local weighted = ceilDiv(prev * remSteps, steps)
  if refund then
    curr = math.max(curr - hits, 0)
    hits = 0
  end
  local ns = {t = start, c = curr, p = prev}
  local reset = start + period - now
  local used = curr + weighted
  if hits > limit then
    return ns, never(reset)
  end
  if used + hits > limit then
    return ns, false, limit - used, reset, slidingWait(limit, period, start, curr, prev, hits, step, steps) - now
  end
  ns.c = ns.c + hits
  return ns, true, limit - used - hits, reset, 0
end

-- algo.expirySlidingWindow
local function expirySlidingWindow(period, s, now)
  if s.c > 0 then
    return s.t + 2 * period - now
  elseif s.p > 0 then
    return s.t + period - now
  end
  return 0
end

-- algo.subAt: the absolute index of the sub-window holding t, its start
-- and end; r·n < 2^53 (algo.Policy.Validate).
local function subAt(t, period, n)
  local q, r = divmod(t, period)
  local k = divmod(r * n, period)
  local base = q * period
  return q * n + k, base + ceilDiv(k * period, n), base + ceilDiv((k + 1) * period, n)
end

-- algo.subStart
local function subStart(idx, period, n)
  local q, k = divmod(idx, n)
  return q * period + ceilDiv(k * period, n)
end

-- algo.subNewest: 0-based, as in Go (s.s[1] is Subs[0]).
local function subNewest(s)
  for i = 1, #s.s do
    if s.s[i] > 0 then
      return i - 1
    end
  end
  return -1
end

-- algo.subCounts: counts[j + 1] is sub-window c−j's.
local function subCounts(s, now, period, n)
  local c, start, finish = subAt(now, period, n)
  local counts = {}
  for j = 1, n + 1 do
    counts[j] = 0
  end
  if subNewest(s) < 0 then
    return counts, c, start, finish
  end
  local h = subAt(s.t, period, n)
  if h > c then
    c, start, finish = h, subStart(h, period, n), subStart(h + 1, period, n)
  end
  for i = 1, #s.s do
    local j = c - h + i - 1
    if j >= 0 and j <= n then
      counts[j + 1] = math.max(s.s[i], 0)
    end
  end
  return counts, c, start, finish
end

-- algo.subState
local function subState(start, counts)
  local k = #counts
  while k > 0 and counts[k] <= 0 do
    k = k - 1
  end
  local subs = {}
  for i = 1, k do
    subs[i] = counts[i]
  end
  return {t = start, s = subs}
end

-- algo.expirySubWindows
local function expirySubWindows(period, n, s, now)
  local i = subNewest(s)
  if i < 0 then
    return 0
  end
  local h = subAt(s.t, period, n)
  return subStart(h - i + n + 1, period, n) - now
end

-- algo.subWait
local function subWait(limit, hits, period, n, c, counts)
  local full = 0
  for j = 1, n do
    full = full + counts[j]
  end
  for k = 0, n do
    if k > 0 then
      full = full - counts[n - k + 1]
    end
    local need = limit - hits - full
    if need >= 0 then
      local start, finish = subStart(c + k, period, n), subStart(c + k + 1, period, n)
      local partial = counts[n - k + 1]
      if partial == 0 then
        return start
      end
      local step, steps = slidingQuantum(finish - start)
      local fit = divmod(need * steps, partial)
      if fit >= steps then
        return start
      end
      return finish - fit * step
    end
  end
  return subStart(c + n + 1, period, n)
end

-- algo.stepSubWindows
local function stepSubWindows(limit, period, n, s, now, hits, refund)
  local counts, c, start, finish = subCounts(s, now, period, n)
  local rem = math.min(finish - now, finish - start)
  local step, steps = slidingQuantum(finish - start)
  local remSteps = math.min(ceilDiv(rem, step), steps)
  if refund then
    for i = 1, n do
      if hits <= 0 then
        break
      end
      local back = math.min(counts[i], hits)
      counts[i] = counts[i] - back
      hits = hits - back
    end
    hits = 0
  end
  local full = 0
  for i = 1, n do
    full = full + counts[i]
  end
  local weighted = ceilDiv(counts[n + 1] * remSteps, steps)
  local used = full + weighted
  local allowed = hits <= limit and used + hits <= limit
  if allowed then
    counts[1] = counts[1] + hits
  end
  local ns = subState(start, counts)
  local reset = expirySubWindows(period, n, ns, now)
  if hits > limit then
    return ns, never(reset)
  elseif not allowed then
    return ns, false, limit - used, reset, subWait(limit, hits, period, n, c, counts) - now
  end
  return ns, true, limit - used - hits, reset, 0
end

-- algo.logReset
local function logReset(count, newest, period, now)
  if count == 0 then
    return 0
  end
  return newest + period - now
end

-- logEntry returns the time of the live log entry at 0-based index, oldest
-- first: the live entries are those with a score ≥ first.
local function logEntry(key, first, index)
  local e = redis.call('ZRANGE', key, first, '+inf', 'BYSCORE', 'LIMIT', index, 1, 'WITHSCORES')
  return tonumber(e[2])
end

-- algo.stepSlidingLog. It only reads; the returned plan (the refunded and
-- the added hits) is what commitSlidingLog writes. Entries before first are
-- pruned when the plan is written, as the Go slice drops them.
local function stepSlidingLog(key, limit, period, now, hits, refund)
  local first = now - period + 1
  local count = redis.call('ZCOUNT', key, first, '+inf')
  local removed = 0
  if refund then
    removed = math.min(hits, count)
    count = count - removed
    hits = 0
  end
  local newest = 0
  if count > 0 then
    newest = logEntry(key, first, count - 1)
  end
  if hits > limit then
    return {remove = 0, add = 0}, never(logReset(count, newest, period, now))
  end
  if count + hits > limit then
    local k = count + hits - limit
    return {remove = removed, add = 0}, false, limit - count, logReset(count, newest, period, now),
      logEntry(key, first, k - 1) + period - now
  end
  if hits > 0 and (count == 0 or now > newest) then
    newest = now
  end
  count = count + hits
  return {remove = removed, add = hits}, true, limit - count, logReset(count, newest, period, now), 0
end

-- algo.mulDiv: a·period/limit = q + r/limit; every product stays below
-- burst·limit < 2^53.
local function mulDiv(a, period, limit)
  local w, m = divmod(period, limit)
  local q, r = divmod(a * m, limit)
  return a * w + q, r
end

-- algo.fracLE
local function fracLE(aq, af, bq, bf)
  return aq < bq or (aq == bq and af <= bf)
end

-- algo.fracSub
local function fracSub(aq, af, bq, bf, limit)
  local q, f = aq - bq, af - bf
  if f < 0 then
    q, f = q - 1, f + limit
  end
  return q, f
end

-- algo.fracAdd
local function fracAdd(aq, af, bq, bf, limit)
  local q, f = aq + bq, af + bf
  if f >= limit then
    q, f = q + 1, f - limit
  end
  return q, f
end

-- algo.fracCeil
local function fracCeil(q, f)
  if f > 0 then
    return q + 1
  end
  return q
end

-- algo.tokens: a float estimate corrected by exact comparisons, so the
-- result is exact whatever the estimate; a debt (negative slack) is minus
-- its whole tokens rounded up.
local function tokens(sq, sf, period, limit, burst)
  if sq < 0 then
    local dq, df = fracSub(0, 0, sq, sf, limit)
    local k = tokens(dq, df, period, limit, burst)
    local q, r = mulDiv(k, period, limit)
    if q ~= dq or r ~= df then
      k = k + 1
    end
    return -k
  end
  local est = (sq * limit + sf) / period
  local k = burst
  if est < burst then
    k = math.floor(est)
  end
  while k > 0 do
    local q, r = mulDiv(k, period, limit)
    if fracLE(q, r, sq, sf) then
      break
    end
    k = k - 1
  end
  while k < burst do
    local q, r = mulDiv(k + 1, period, limit)
    if not fracLE(q, r, sq, sf) then
      break
    end
    k = k + 1
  end
  return k
end

-- algo.debt: hits·T for at most two capacities of hits, in two exact parts.
local function debt(hits, period, limit, burst)
  if hits <= burst then
    return mulDiv(hits, period, limit)
  end
  local q, r = mulDiv(math.min(hits - burst, burst), period, limit)
  local bq, br = mulDiv(burst, period, limit)
  return fracAdd(q, r, bq, br, limit)
end

-- algo.bucketTAT
local function bucketTAT(s, now, limit)
  local tat, frac = s.t, s.f
  if frac < 0 or frac >= limit then
    tat, frac = tat + 1, 0
  end
  if tat < now then
    tat, frac = now, 0
  end
  return tat, frac
end

-- algo.overdrawBucket: TAT moves to max(TAT, now) + hits·T, never past
-- now + 2·burst·T.
local function overdrawBucket(limit, period, burst, s, now, hits)
  local tat, frac = bucketTAT(s, now, limit)
  local q, r = debt(hits, period, limit, burst)
  tat, frac = fracAdd(tat, frac, q, r, limit)
  local cq, cr = debt(2 * burst, period, limit, burst)
  if not fracLE(tat - now, frac, cq, cr) then
    tat, frac = fracAdd(now, 0, cq, cr, limit)
  end
  return {t = tat, f = frac}
end

-- algo.stepTokenBucket, for token_bucket and gcra
local function stepTokenBucket(limit, period, burst, s, now, hits, refund)
  local tat, frac = bucketTAT(s, now, limit)
  if refund then
    local q, r = debt(hits, period, limit, burst)
    tat, frac = fracSub(tat, frac, q, r, limit)
    if tat < now then
      tat, frac = now, 0
    end
    hits = 0
  elseif hits > burst then
    return {t = tat, f = frac}, never(fracCeil(tat - now, frac))
  end
  local bq, br = mulDiv(burst, period, limit)
  local q, r = mulDiv(burst - hits, period, limit)
  if not fracLE(tat - now, frac, q, r) then
    local sq, sf = fracSub(bq, br, tat - now, frac, limit)
    local wq, wf = fracSub(tat - now, frac, q, r, limit)
    return {t = tat, f = frac}, false, tokens(sq, sf, period, limit, burst), fracCeil(tat - now, frac), fracCeil(wq, wf)
  end
  if hits > 0 then
    q, r = mulDiv(hits, period, limit)
    tat, frac = fracAdd(tat, frac, q, r, limit)
  end
  local sq, sf = fracSub(bq, br, tat - now, frac, limit)
  return {t = tat, f = frac}, true, tokens(sq, sf, period, limit, burst), fracCeil(tat - now, frac), 0
end

-- algo.expiryTokenBucket, for token_bucket and gcra
local function expiryTokenBucket(s, now)
  local e = s.t - now
  if s.f ~= 0 then
    e = e + 1
  end
  return e
end

-- loadFields reads a state value, "<a>" or "<a>:<b>" (see the header), as
-- numbers; a missing part reads as 0, a missing key or an unreadable value
-- as no key (nil).
local function loadFields(v)
  local a, b, c = string.match(v, '^(-?%d+):?(-?%d*):?(-?%d*)$')
  if not a then
    return nil
  end
  return tonumber(a), tonumber(b) or 0, tonumber(c) or 0
end

-- loadWindow reads a sliding_window value (see the header) as the window
-- start in µs, its count and the previous window's count; an unreadable
-- value reads as no key.
local function loadWindow(v, period)
  if string.find(v, ':', 1, true) then
    local i, c, p = loadFields(v)
    if not i then
      return 0, 0, 0
    end
    return i * period, c, p
  end
  if not string.find(v, '^-?%d+$') then
    return 0, 0, 0
  end
  -- Packed: the trailing length digits say where the counts begin.
  local n = #v
  local np = tonumber(string.sub(v, n, n)) or 0
  n = n - 1
  local nc = tonumber(string.sub(v, n, n)) or 0
  n = n - 1
  local p = tonumber(string.sub(v, n - np + 1, n)) or 0
  n = n - np
  local c = tonumber(string.sub(v, n - nc + 1, n)) or 0
  n = n - nc
  local i = tonumber(string.sub(v, 1, n))
  if not i then
    return 0, 0, 0
  end
  return i * period, c, p
end

-- countDigits spells a count of a packed window value: '' for 0, nil when
-- it does not fit (negative, or more digits than one length digit counts).
local function countDigits(c)
  if c == 0 then
    return ''
  end
  if c < 0 or c >= 1e9 then
    return nil
  end
  return string.format('%.0f', c)
end

-- windowValue formats a sliding_window state: the window index, then the
-- counts, packed when they fit, else joined by ':'.
local function windowValue(s, period)
  -- s.t is always a window start, a multiple of period.
  local i = divmod(s.t, period)
  local c, p = countDigits(s.c), countDigits(s.p)
  if c == nil or p == nil then
    return string.format('%.0f:%.0f:%.0f', i, s.c, s.p)
  end
  return string.format('%.0f%s%s%.0f%.0f', i, c, p, #c, #p)
end

-- base36 spells x ≥ 0 in base 36 (digits 0-9a-z), padded with zeros to
-- w digits.
local B36 = '0123456789abcdefghijklmnopqrstuvwxyz'
local function base36(x, w)
  if x < 36 and w <= 1 then
    return string.sub(B36, x + 1, x + 1)
  end
  local out = {}
  repeat
    local q, r = divmod(x, 36)
    out[#out + 1] = string.sub(B36, r + 1, r + 1)
    x = q
  until x == 0
  while #out < w do
    out[#out + 1] = '0'
  end
  return string.reverse(table.concat(out))
end

-- loadSubs reads a sub-window value "<h>:<w><counts>" (see the header) as
-- the start of sub-window h and its counts; an unreadable value reads as
-- no key.
local function loadSubs(v, period, n)
  local hs, ws, digits = string.match(v, '^([0-9a-z]+):([1-9])([0-9a-z]+)$')
  if not hs then
    return {t = 0, s = {}}
  end
  local w = tonumber(ws)
  local k = #digits / w
  if k ~= math.floor(k) or k > n + 1 then
    return {t = 0, s = {}}
  end
  local subs = {}
  if w == 1 then
    -- One digit each, the common case: read the bytes ('0' is 48, 'a' 97).
    local bytes = {string.byte(digits, 1, k)}
    for i = 1, k do
      local b = bytes[i]
      if b >= 97 then
        subs[i] = b - 87
      else
        subs[i] = b - 48
      end
    end
  else
    for i = 1, k do
      subs[i] = tonumber(string.sub(digits, (i - 1) * w + 1, i * w), 36)
    end
  end
  return {t = subStart(tonumber(hs, 36), period, n), s = subs}
end

-- subsValue formats a sub-window state for SET (the inverse of loadSubs):
-- the index of sub-window s.t, then every count in as many base-36 digits
-- as the largest needs.
local function subsValue(s, period, n)
  local m = 0
  for i = 1, #s.s do
    m = math.max(m, s.s[i])
  end
  local w = #base36(m, 1)
  local parts = {base36((subAt(s.t, period, n)), 1), ':', base36(w, 1)}
  for i = 1, #s.s do
    parts[#parts + 1] = base36(s.s[i], w)
  end
  return table.concat(parts)
end

-- stateValue formats limit l's new state for SET (the inverse of load).
local function stateValue(l, s)
  local a = l.alg
  if a == 1 then
    return string.format('%.0f', s.c)
  elseif a == 2 and l.sub > 1 then
    return subsValue(s, l.period, l.sub)
  elseif a == 2 then
    return windowValue(s, l.period)
  elseif s.f == 0 then
    return string.format('%.0f', s.t)
  end
  return string.format('%.0f:%.0f', s.t, s.f)
end

-- load reads limit l's state at now (algo.State; a missing key reads as
-- zeros). A sliding log is read by its step instead.
local function load(l, now)
  local a = l.alg
  if a == 3 then
    return nil
  end
  if a == 1 then
    -- The hash names the window holding now (see the header); an
    -- unreadable count reads as no count.
    local v = redis.call('HGET', l.key, l.field)
    local c = v and tonumber(v)
    if not c or l.period <= 0 then
      return {t = 0, c = 0, p = 0}
    end
    return {t = windowStart(now, l.period), c = c, p = 0}
  end
  local v = redis.call('GET', l.key)
  if a == 2 and l.sub > 1 then
    if v then
      return loadSubs(v, l.period, l.sub)
    end
    return {t = 0, s = {}}
  elseif a == 2 then
    local t, c, p = 0, 0, 0
    if v then
      t, c, p = loadWindow(v, l.period)
    end
    return {t = t, c = c, p = p}
  end
  local t, f = 0, 0
  if v then
    t, f = loadFields(v)
    if not t then
      t, f = 0, 0
    end
  end
  return {t = t, f = f}
end

-- capacity is algo.Policy.Capacity of l.
local function capacity(l)
  if (l.alg == 4 or l.alg == 5) and l.burst > 0 and l.limit > 0 then
    return l.burst
  end
  return l.limit
end

-- algo.stepAlgorithm: returns the new state (nil: leave the key alone),
-- allowed, remaining, reset, retry.
local function stepAlgorithm(l, now, hits, refund)
  local limit, period, a = l.limit, l.period, l.alg
  local burst = capacity(l)
  if a == 1 then
    return stepFixedWindow(limit, period, l.state, now, hits, refund)
  elseif a == 2 and l.sub > 1 then
    return stepSubWindows(limit, period, l.sub, l.state, now, hits, refund)
  elseif a == 2 then
    return stepSlidingWindow(limit, period, l.state, now, hits, refund)
  elseif a == 3 then
    return stepSlidingLog(l.key, limit, period, now, hits, refund)
  elseif a == 4 or a == 5 then
    return stepTokenBucket(limit, period, burst, l.state, now, hits, refund)
  end
  return nil, blocked(period, now, refund)
end

-- algo.probe: a check-only request's decision, allowed exactly when one
-- hit would be.
local function probe(l, now)
  local _, _, rem, reset = stepAlgorithm(l, now, 0, false)
  local _, allowed, _, _, retry = stepAlgorithm(l, now, 1, false)
  return allowed, rem, reset, retry
end

-- algo.left: probe's Remaining alone
local function left(l, now)
  if l.limit <= 0 or l.period <= 0 then
    return 0
  end
  local _, _, rem = stepAlgorithm(l, now, 0, false)
  return rem
end

-- algo.step
local function step(l, now, hits, refund)
  if hits < 0 then
    hits = 0
  end
  if l.limit <= 0 or l.period <= 0 then
    return nil, blocked(l.period, now, refund)
  end
  if hits == 0 and not refund then
    return nil, probe(l, now)
  end
  return stepAlgorithm(l, now, hits, refund)
end

-- MAX_LIMIT is algo.MaxLimit: how far past its limit a window or log may
-- be overdrawn.
local MAX_LIMIT = __MAX_LIMIT__

-- algo.overdraw: the state with hits counted past the limit (a step under
-- a limit raised by MAX_LIMIT; a bucket goes into debt). nil: count
-- nothing more.
local function overdraw(l, now, hits)
  if l.alg == 4 or l.alg == 5 then
    return overdrawBucket(l.limit, l.period, capacity(l), l.state, now, hits)
  end
  l.limit = l.limit + MAX_LIMIT
  local ns, allowed = stepAlgorithm(l, now, hits, false)
  l.limit = l.limit - MAX_LIMIT
  if not allowed then
    return nil
  end
  return ns
end


-- algo.take: consume min(hits, the check-only remaining), at least one
-- hit; returns what step returns, then granted.
local function take(l, now, hits)
  local g = math.min(hits, left(l, now))
  if g >= 1 then
    local ns, allowed, rem, reset, retry = step(l, now, g, false)
    if allowed then
      return ns, allowed, rem, reset, retry, g
    end
  end
  local ns, allowed, rem, reset, retry = step(l, now, 1, false)
  local granted = 0
  if allowed then
    granted = 1
  end
  return ns, allowed, rem, reset, retry, granted
end

-- Queue mode (algo/reserve.go): reservations and their cancellation. --

-- algo.reservable: l was denied with l.retry.
local function reservable(l)
  return l.maxDelay > 0 and not l.take and not l.refund and not l.charge and l.hits > 0 and (l.alg == 4 or l.alg == 5)
    and l.retry > 0 and l.retry <= l.maxDelay
end

-- algo.returnable: the bucket's TAT is still at most reservedAt + burst·T.
local function returnable(l, reservedAt)
  local a, limit, period = l.alg, l.limit, l.period
  if not (a == 4 or a == 5) or limit <= 0 or period <= 0 then
    return false
  end
  local burst = limit
  if l.burst > 0 then
    burst = l.burst
  end
  local tat, frac = l.state.t, l.state.f
  if frac < 0 or frac >= limit then
    tat, frac = tat + 1, 0
  end
  local bq, br = mulDiv(burst, period, limit)
  return fracLE(tat - reservedAt, frac, bq, br)
end

-- algo.cancel: returns what step returns, then granted (the hits given
-- back); a reservation that cannot be returned leaves the key alone.
local function cancel(l, now)
  if l.hits <= 0 or not returnable(l, l.reservedAt) then
    local _, allowed, rem, reset, retry = step(l, now, 0, false)
    return nil, allowed, rem, reset, retry, 0
  end
  local ns, allowed, rem, reset, retry = step(l, now, l.hits, true)
  return ns, allowed, rem, reset, retry, math.min(l.hits, capacity(l))
end

-- End of queue mode. --

-- commitSlidingLog writes a sliding log's plan and sets its expiry
-- (algo.expirySlidingLog: the newest entry's time + period).
local function commitSlidingLog(key, period, now, plan)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - period)
  if plan.remove > 0 then
    redis.call('ZREMRANGEBYRANK', key, -plan.remove, -1)
  end
  if plan.add > 0 then
    local n = redis.call('ZCOUNT', key, now, now)
    local args = {}
    for i = 0, plan.add - 1 do
      args[#args + 1] = now
      args[#args + 1] = string.format('%.0f:%06.0f', now, n + i)
      if #args >= 1000 then
        redis.call('ZADD', key, unpack(args))
        args = {}
      end
    end
    if #args > 0 then
      redis.call('ZADD', key, unpack(args))
    end
  end
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  local e = 0
  if #newest == 2 then
    e = tonumber(newest[2]) + period - now
  end
  local ms = ttlMs(e)
  if ms == 0 then
    redis.call('DEL', key)
  else
    redis.call('PEXPIRE', key, ms)
  end
end

-- commit writes limit l's new state with its expiry (algo.Expiry).
local function commit(l, now)
  local ns, a, key = l.ns, l.alg, l.key
  if ns == nil then
    return
  end
  if a == 3 then
    commitSlidingLog(key, l.period, now, ns)
    return
  end
  local e
  if a == 1 then
    e = expiryFixedWindow(l.period, ns, now)
    if e <= 0 then
      if redis.call('HEXISTS', key, l.field) == 1 then
        redis.call('HSET', key, l.field, 0)
      end
      return
    end
    redis.call('HSET', key, l.field, stateValue(l, ns))
    -- The first writer of the window sets the hash's expiry; the window's
    -- end is the same for every writer.
    redis.call('PEXPIRE', key, ttlMs(e + windowMargin(l.period)), 'NX')
    return
  elseif a == 2 and l.sub > 1 then
    e = expirySubWindows(l.period, l.sub, ns, now)
  elseif a == 2 then
    e = expirySlidingWindow(l.period, ns, now)
  else
    e = expiryTokenBucket(ns, now)
  end
  local ms = ttlMs(e)
  if ms == 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('SET', key, stateValue(l, ns), 'PX', ms)
end

-- algo.charge, written: l's hits are counted whether or not they fit (a
-- limit's cost: charge, algo.Check.Charge). When they fit, l.ns is written
-- as for any consume. When they do not, they are counted past the limit
-- (overdraw), and the decision is the check-only one of the written state
-- (read back from Redis for a sliding log), denied.
local function commitCharge(l, now)
  if l.allowed then
    commit(l, now)
    return
  end
  if l.limit <= 0 or l.period <= 0 then
    return
  end
  local ns = overdraw(l, now, l.hits)
  if ns ~= nil then
    l.ns = ns
    commit(l, now)
    if l.alg ~= 3 then
      l.state = ns
    end
  end
  local _
  _, l.remaining, l.reset, l.retry = probe(l, now)
  l.allowed = false
  l.granted = 0
end

-- Bits of a limit's code above its algorithm (see ARGV).
local MODE, BURST, HITS, EXTRA, CHARGE = 8, 32, 64, 128, 256

-- limitArgs returns the number of ARGV entries of the limit whose code is
-- ARGV[b], or nil when that is no code.
local function limitArgs(b)
  local code = tonumber(ARGV[b])
  if code == nil or code < 0 or code >= 2 * CHARGE then
    return nil
  end
  code = code % CHARGE
  local m = 3
  if code % HITS >= BURST then
    m = m + 1
  end
  if code % EXTRA >= HITS then
    m = m + 1
  end
  if code >= EXTRA then
    m = m + 1
  end
  return m
end

-- applyRequest is algo.ApplyAll for one request r: its r.n limits have the
-- keys KEYS[r.k + i] and their arguments from ARGV[r.a], its fixed
-- windows' fields from ARGV[r.f]. It appends the
-- request's {allowed_all, then per limit allowed, remaining, reset, retry,
-- granted} to reply. It runs under pcall, so its errors (a key of another
-- type, say) fail this request alone.
local function applyRequest(r, now, reply)
  local limits = {}
  local allowed = true
  local wait = 0 -- queue mode: the latest reservation's delay
  local b, f = r.a, r.f
  for i = 1, r.n do
    local code = tonumber(ARGV[b])
    local charged = code >= CHARGE
    code = code % CHARGE
    local mode = math.floor(code / MODE) % 4
    -- Every field is in the constructor, which sizes the table once.
    local l = {
      key = KEYS[r.k + i],
      field = false,
      alg = code % MODE,
      limit = tonumber(ARGV[b + 1]),
      period = tonumber(ARGV[b + 2]),
      burst = 0,
      sub = 0,
      hits = 1,
      refund = mode == 1 or mode == 3,
      take = mode == 2,
      charge = charged and mode == 0,
      maxDelay = 0,
      reservedAt = 0,
      granted = 0,
      state = false,
      ns = false,
      allowed = false,
      remaining = 0,
      reset = 0,
      retry = 0,
    }
    b = b + 3
    if code % HITS >= BURST then
      l.burst = tonumber(ARGV[b])
      b = b + 1
    end
    -- A sliding window's burst argument is its sub-window count.
    if l.alg == 2 then
      l.sub, l.burst = l.burst, 0
    end
    if code % EXTRA >= HITS then
      l.hits = tonumber(ARGV[b])
      b = b + 1
    end
    if code >= EXTRA then
      if mode == 3 then
        l.reservedAt = tonumber(ARGV[b])
      else
        l.maxDelay = tonumber(ARGV[b])
      end
      b = b + 1
    end
    if l.hits < 0 then
      l.hits = 0
    end
    if l.alg == 1 then
      l.field = ARGV[f]
      f = f + 1
    end
    l.state = load(l, now)
    if mode == 3 and l.reservedAt ~= 0 then
      l.ns, l.allowed, l.remaining, l.reset, l.retry, l.granted = cancel(l, now)
    elseif l.take and l.hits > 0 then
      l.ns, l.allowed, l.remaining, l.reset, l.retry, l.granted = take(l, now, l.hits)
    else
      l.ns, l.allowed, l.remaining, l.reset, l.retry = step(l, now, l.hits, l.refund)
    end
    if l.refund then
      commit(l, now)
    elseif not l.allowed then
      if reservable(l) then
        wait = math.max(wait, l.retry)
      else
        allowed = false
      end
    end
    limits[i] = l
  end
  reply[#reply + 1] = allowed and 1 or 0
  for i = 1, r.n do
    local l = limits[i]
    if l.charge and l.hits > 0 then
      -- A charge is counted whatever the request's outcome.
      commitCharge(l, now)
    elseif not l.refund and l.hits > 0 and (l.allowed or allowed) then
      if allowed then
        if wait > 0 then
          -- algo.admitAt: a bucket consumes at its reserved time.
          if (l.alg == 4 or l.alg == 5) and not l.take then
            l.ns, l.allowed, l.remaining, l.reset, l.retry = step(l, now + wait, l.hits, false)
          end
          l.retry = wait
        end
        commit(l, now)
      else
        local _
        _, l.allowed, l.remaining, l.reset, l.retry = step(l, now, 0, false)
        l.granted = 0
      end
    end
    reply[#reply + 1] = l.allowed and 1 or 0
    reply[#reply + 1] = l.remaining
    reply[#reply + 1] = l.reset
    reply[#reply + 1] = l.retry
    reply[#reply + 1] = l.granted
  end
end

-- failed classifies an error raised while applying a request: 2 for a key
-- holding another type (WRONGTYPE), 3 for anything else.
local function failed(err)
  if type(err) == 'table' then
    err = err.err
  end
  if type(err) == 'string' and string.find(err, 'WRONGTYPE', 1, true) then
    return 2
  end
  return 3
end

-- The framing of every request is checked before any is applied, so that a
-- malformed call writes nothing; it is kept, one {k, a, n, now} per request
-- (its keys follow KEYS[k], its limits' arguments start at ARGV[a], its
-- fixed windows' fields at ARGV[f]).
local MALFORMED = 'ERR apply.lua: malformed arguments: want per request n (or -n and now), per key a code, limit, period and the burst and hits its code announces, then a field per fixed_window key, with n keys each'
local reqs = {}
local k, a, nargs = 0, 1, #ARGV
while a <= nargs do
  local n, now = tonumber(ARGV[a]), 0
  a = a + 1
  if n ~= nil and n < 0 then
    n, now = -n, tonumber(ARGV[a])
    a = a + 1
  end
  if n == nil or now == nil or n < 1 or k + n > #KEYS then
    return redis.error_reply(MALFORMED)
  end
  local r = {k = k, a = a, n = n, now = now, f = 0}
  local fields = 0
  for _ = 1, n do
    local m = limitArgs(a)
    if m == nil then
      return redis.error_reply(MALFORMED)
    end
    if tonumber(ARGV[a]) % CHARGE % MODE == 1 then
      fields = fields + 1
    end
    a = a + m
  end
  r.f = a
  a = a + fields
  if a - 1 > nargs then
    return redis.error_reply(MALFORMED)
  end
  reqs[#reqs + 1] = r
  k = k + n
end
if k ~= #KEYS then
  return redis.error_reply(MALFORMED)
end

-- The requests, one after the other: each sees what the ones before it
-- wrote, as if each had its own script call. Redis's TIME is read once.
local reply = {}
local serverNow = 0
for _, r in ipairs(reqs) do
  local now = r.now
  if now == 0 then
    if serverNow == 0 then
      local t = redis.call('TIME')
      serverNow = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    now = serverNow
  end
  local base = #reply
  reply[base + 1] = now
  local ok, err = pcall(applyRequest, r, now, reply)
  if not ok then
    for j = #reply, base + 2, -1 do
      reply[j] = nil
    end
    reply[base + 2] = failed(err)
    for j = 1, 5 * r.n do
      reply[base + 2 + j] = 0
    end
  end
end
return reply
