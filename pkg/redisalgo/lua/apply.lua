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
--           (distinct within a request; one key per limit)
-- ARGV      per request: a header, n (its number of limits) when it is
--           evaluated at the server's TIME, which production uses, or -n
--           then now in Unix µs (a given now serves tests and refunds that
--           must happen at the time their consumption did); then per limit
--           code, limit, period µs, then burst if the code says so (else
--           0 = limit), then hits if the code says so (else 1; 0 = check
--           only). code = algorithm (1 fixed_window, 2 sliding_window,
--           3 sliding_log, 4 token_bucket, 5 gcra) + 8 × mode (0 consume,
--           1 refund, 2 take: hits is the most to consume,
--           algo.Check.Take) + 32 when burst follows + 64 when hits
--           follows. The common request (one limit, one hit, no burst, at
--           TIME) is 4 arguments: Redis and Lua pay for each one, and at
--           moderate load a script call carries one request.
-- Reply     per request: now, status, then per limit: allowed, remaining,
--           reset_after µs, retry_after µs (-1: never), granted (what an
--           allowed take consumed, else 0; algo.Decision has their
--           meaning). status is allowed_all (0 or 1), or 2 when a
--           key of the request holds another type (WRONGTYPE), 3 for any
--           other error; a failed request's limits read 0, and only that
--           request fails.
-- Needs Redis 6.2 or later (ZRANGE … BYSCORE).
--
-- First every limit is decided without writing; then, if every limit that
-- is not a refund allowed, the consuming limits are written. Refunds are
-- always written; check-only limits never are.
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
-- the sliding log's; numbers in decimal, so that one GET reads a state and
-- one SET … PX writes it with its expiry:
--   fixed_window    "<i><c><n>"        i = window index (start / period),
--                                      c = count, n = c's digit count
--   sliding_window  "<i><c><p><n><m>"  i = current window index, c = its
--                                      count, p = the previous count, n
--                                      and m = c's and p's digit counts
--   sliding_log     zset  one member "<time>:<n>" per hit, score = time; n
--                         numbers the hits of one µs (six digits, so members
--                         of equal score sort by n)
--   token_bucket    "<t>" when f = 0, else "<t>:<f>": TAT = t + f/limit µs
--   gcra            the same value as token_bucket (f = 0 whenever period
--                   is a multiple of limit)
-- A window value is packed into one integer because Redis keeps a value
-- that reads as a 64-bit integer in the 16-byte object itself (what
-- envoyproxy/ratelimit's INCRBY counters and a whole token_bucket TAT get),
-- whereas "<start µs>:<count>" was a 48-byte string: 32 bytes a key, the
-- difference between more and less memory than the reference (BENCHMARKS.md,
-- "Redis memory per key"). So the window is stored as its index, a 10-digit
-- number at a 1 s period, and a count of 0 as no digits (n or m = 0); the
-- trailing length digits find the counts from the end: 12 hits in window
-- 29934682 of a minute are "29934682122". A count of 10 digits
-- or more (or a negative one) does not fit one length digit: such a state
-- is "<i>:<c>" or "<i>:<c>:<p>" instead, and a value with ':' reads so.
-- The period is part of the key, so the index always converts back to the
-- µs of algo.State with the period it was written with. A packed value that
-- is no 64-bit integer to Redis (more than 19 digits, say, at a period of a
-- few µs) stays a string there, longer but read the same way.
-- Every written key expires after algo.Expiry rounded up to ms; a state
-- whose Expiry is 0 is deleted. Keeping a key longer is harmless: a state
-- past its Expiry decides like no key.

local SLIDING_STEPS = 1048576 -- algo.slidingSteps, 2^20

-- algo.divmod: floor division. Below 2^53 the floor of the rounded a/b is
-- already exact; the correction keeps it so for any double.
local function divmod(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
    r = r + b
  elseif r >= b then
    q = q + 1
    r = r - b
  end
  return q, r
end

-- algo.ceilDiv
local function ceilDiv(a, b)
  local q, r = divmod(a, b)
  if r > 0 then
    q = q + 1
  end
  return q
end

-- algo.Never
local NEVER = -1

-- algo.never: returns allowed, remaining, reset, retry.
local function never(reset)
  return false, 0, reset, NEVER
end

-- algo.blocked
local function blocked(hits, refund)
  if hits == 0 or refund then
    return true, 0, 0, 0
  end
  return never(0)
end

-- algo.windowStart
local function windowStart(now, period)
  local _, off = divmod(now, period)
  return now - off
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
  local reset = 0
  if count > 0 then
    reset = start + period - now
  end
  if hits > limit then
    return ns, never(reset)
  end
  if count + hits > limit then
    return ns, false, math.max(limit - count, 0), reset, start + period - now
  end
  count = count + hits
  ns.c = count
  if count > 0 then
    reset = start + period - now
  end
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
  local reset = 0
  if curr > 0 or prev > 0 then
    reset = start + period - now
  end
  if hits > limit then
    return ns, never(reset)
  end
  local used = curr + weighted
  if used + hits > limit then
    return ns, false, math.max(limit - used, 0), reset, slidingWait(limit, period, start, curr, prev, hits, step, steps) - now
  end
  ns.c = ns.c + hits
  if hits > 0 then
    reset = start + period - now
  end
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
    return {remove = removed, add = 0}, false, math.max(limit - count, 0), logReset(count, newest, period, now),
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
-- result is exact whatever the estimate.
local function tokens(sq, sf, period, limit, burst)
  if sq < 0 then
    return 0
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

-- algo.stepTokenBucket, for token_bucket and gcra
local function stepTokenBucket(limit, period, burst, s, now, hits, refund)
  local tat, frac = s.t, s.f
  if frac < 0 or frac >= limit then
    tat, frac = tat + 1, 0
  end
  if tat < now then
    tat, frac = now, 0
  end
  if refund then
    local q, r = mulDiv(math.min(hits, burst), period, limit)
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

-- loadWindow reads a window value (fixed_window a = 1, sliding_window a =
-- 2; see the header) as the window start in µs, its count and the previous
-- window's count; an unreadable value reads as no key.
local function loadWindow(v, a, period)
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
  local n, np = #v, 0
  if a == 2 then
    np = tonumber(string.sub(v, n, n)) or 0
    n = n - 1
  end
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

-- windowValue formats a fixed (a = 1) or sliding (a = 2) window state: the
-- window index, then the counts, packed when they fit, else joined by ':'.
local function windowValue(a, s, period)
  -- s.t is always a window start, a multiple of period.
  local i = divmod(s.t, period)
  local c, p = countDigits(s.c), ''
  if a == 2 then
    p = countDigits(s.p)
  end
  if c == nil or p == nil then
    if a == 1 then
      return string.format('%.0f:%.0f', i, s.c)
    end
    return string.format('%.0f:%.0f:%.0f', i, s.c, s.p)
  end
  if a == 1 then
    return string.format('%.0f%s%.0f', i, c, #c)
  end
  return string.format('%.0f%s%s%.0f%.0f', i, c, p, #c, #p)
end

-- stateValue formats limit l's new state for SET (the inverse of load).
local function stateValue(l, s)
  local a = l.alg
  if a == 1 or a == 2 then
    return windowValue(a, s, l.period)
  elseif s.f == 0 then
    return string.format('%.0f', s.t)
  end
  return string.format('%.0f:%.0f', s.t, s.f)
end

-- load reads limit l's state (algo.State; a missing key reads as zeros).
-- A sliding log is read by its step instead.
local function load(l)
  local a = l.alg
  if a == 3 then
    return nil
  end
  local v = redis.call('GET', l.key)
  if a == 1 or a == 2 then
    local t, c, p = 0, 0, 0
    if v then
      t, c, p = loadWindow(v, a, l.period)
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

-- algo.step: returns the new state (nil: leave the key alone), allowed,
-- remaining, reset, retry.
local function step(l, now, hits, refund)
  if hits < 0 then
    hits = 0
  end
  local limit, period, a = l.limit, l.period, l.alg
  if limit <= 0 or period <= 0 then
    return nil, blocked(hits, refund)
  end
  -- algo.Policy.Capacity
  local burst = limit
  if (a == 4 or a == 5) and l.burst > 0 then
    burst = l.burst
  end
  if a == 1 then
    return stepFixedWindow(limit, period, l.state, now, hits, refund)
  elseif a == 2 then
    return stepSlidingWindow(limit, period, l.state, now, hits, refund)
  elseif a == 3 then
    return stepSlidingLog(l.key, limit, period, now, hits, refund)
  elseif a == 4 or a == 5 then
    return stepTokenBucket(limit, period, burst, l.state, now, hits, refund)
  end
  return nil, blocked(hits, refund)
end

-- algo.take: consume min(hits, the check-only remaining), at least one
-- hit; returns what step returns, then granted.
local function take(l, now, hits)
  local _, _, remaining = step(l, now, 0, false)
  local g = math.min(hits, remaining)
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

-- ttlMs converts an algo.Expiry to a PEXPIRE, or 0 to delete the key.
local function ttlMs(e)
  if e <= 0 then
    return 0
  end
  return ceilDiv(e, 1000)
end

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

-- Bits of a limit's code above its algorithm (see ARGV).
local MODE, BURST, HITS = 8, 32, 64

-- limitArgs returns the number of ARGV entries of the limit whose code is
-- ARGV[b], or nil when that is no code.
local function limitArgs(b)
  local code = tonumber(ARGV[b])
  if code == nil or code < 0 or code >= 2 * HITS then
    return nil
  end
  local m = 3
  if code % HITS >= BURST then
    m = m + 1
  end
  if code >= HITS then
    m = m + 1
  end
  return m
end

-- applyRequest is algo.ApplyAll for one request r: its r.n limits have the
-- keys KEYS[r.k + i] and their arguments from ARGV[r.a]. It appends the
-- request's {allowed_all, then per limit allowed, remaining, reset, retry,
-- granted} to reply. It runs under pcall, so its errors (a key of another
-- type, say) fail this request alone.
local function applyRequest(r, now, reply)
  local limits = {}
  local allowed = true
  local b = r.a
  for i = 1, r.n do
    local code = tonumber(ARGV[b])
    local mode = math.floor(code / MODE) % 4
    -- Every field is in the constructor, which sizes the table once.
    local l = {
      key = KEYS[r.k + i],
      alg = code % MODE,
      limit = tonumber(ARGV[b + 1]),
      period = tonumber(ARGV[b + 2]),
      burst = 0,
      hits = 1,
      refund = mode == 1,
      take = mode == 2,
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
    if code >= HITS then
      l.hits = tonumber(ARGV[b])
      b = b + 1
    end
    if l.hits < 0 then
      l.hits = 0
    end
    l.state = load(l)
    if l.take and l.hits > 0 then
      l.ns, l.allowed, l.remaining, l.reset, l.retry, l.granted = take(l, now, l.hits)
    else
      l.ns, l.allowed, l.remaining, l.reset, l.retry = step(l, now, l.hits, l.refund)
    end
    if l.refund then
      commit(l, now)
    elseif not l.allowed then
      allowed = false
    end
    limits[i] = l
  end
  reply[#reply + 1] = allowed and 1 or 0
  for i = 1, r.n do
    local l = limits[i]
    if not l.refund and l.hits > 0 and l.allowed then
      if allowed then
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
-- (its keys follow KEYS[k], its limits' arguments start at ARGV[a]).
local MALFORMED = 'ERR apply.lua: malformed arguments: want per request n (or -n and now) and per key a code, limit, period and the burst and hits its code announces, with n keys each'
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
  local r = {k = k, a = a, n = n, now = now}
  for _ = 1, n do
    local m = limitArgs(a)
    if m == nil then
      return redis.error_reply(MALFORMED)
    end
    a = a + m
  end
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
