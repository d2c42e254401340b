-- shared.lua is written into apply.lua and lean.lua where each has its
-- __SHARED__ line, at load (redisalgo.withConstants), so the helpers both
-- scripts need are written once. A script cannot call another's
-- functions; this is how they share them.

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

-- windowMargin is how much longer than its window a fixed window's key
-- lives (redisalgo.windowMargin): a period, at most MAX_WINDOW_MARGIN µs,
-- which the backend writes in from redisalgo.maxWindowMargin before it
-- loads the script (script.go). Another replica,
-- whose tracked clock may lag this one's, can still count into the window
-- after this one thinks it ended: the key must not have expired under it.
-- A past window's key is never read by a replica whose clock is right, so
-- the margin costs only memory.
local function windowMargin(period)
  return math.min(period, __MAX_WINDOW_MARGIN__)
end

-- ttlMs converts an algo.Expiry to a PEXPIRE, or 0 to delete the key.
local function ttlMs(e)
  if e <= 0 then
    return 0
  end
  return ceilDiv(e, 1000)
end

