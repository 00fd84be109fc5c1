-- ratekit: one decision on one client by every limit of a limiter, run
-- atomically inside Redis, all or nothing; or the refund of a request.
--
-- KEYS     the state of the client under each limit that keeps state (a
--          limit of 0 requests keeps none: the caller decides it), all
--          under the same hash tag, so in one Redis Cluster slot
-- ARGV     mode ('1' take: decide, and count when every limit admits;
--          '0' peek: decide only; 'r' refund), cost, now ('' reads Redis
--          TIME, in microseconds; for a refund, the time its take
--          returned), units per millisecond (for TTLs), slack
--          (milliseconds a key outlives its state), then NARGS per key:
--          algorithm, count, period, burst, emission, tau, shaping (1/0),
--          max delay, phase (added to now before windows are cut)
--
-- A take or a peek returns {now, then per key: allowed (1/0), remaining,
-- reset, retry, delay}, times in the caller's unit; a refund returns
-- {now}. The arithmetic is that of core/algo.go; the conformance suite in
-- core/storetest holds both to the same traces.
--
-- Lua numbers are doubles: integers are exact below 2^53. Times are
-- microseconds since the Unix epoch (about 2^51 today) or, under a test
-- clock, nanoseconds since a recent base; products that could pass 2^52
-- go through muldiv, which never forms them.
--
-- Every write sets a TTL in this same script: the moment the state is back
-- to full capacity, plus a slack, so that a key never outlives its meaning
-- for long and never expires while it still decides anything.

local function str(n)
  return string.format('%d', n)
end

-- floor(a / b) for b > 0, corrected for the rounding of the division.
local function floordiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
  return q
end

-- floor(a * b / c) and the remainder, for non-negative a, b and c > 0
-- below 2^52, with a quotient below 2^53.
local TWO52 = 4503599627370496
local function muldiv(a, b, c)
  if a * b < TWO52 then
    local ab = a * b
    local q = floordiv(ab, c)
    return q, ab - q * c
  end
  -- Shift-and-add over the bits of a, keeping q * c + r = the partial
  -- product with r < c, so that nothing exceeds 2c.
  local bq = floordiv(b, c)
  local br = b - bq * c
  local bits = {}
  while a > 0 do
    local bit = a % 2
    bits[#bits + 1] = bit
    a = (a - bit) / 2
  end
  local q, r = 0, 0
  for i = #bits, 1, -1 do
    q, r = q * 2, r * 2
    if r >= c then
      q, r = q + 1, r - c
    end
    if bits[i] == 1 then
      q, r = q + bq, r + br
      if r >= c then
        q, r = q + 1, r - c
      end
    end
  end
  return q, r
end

local function muldivceil(a, b, c)
  local q, r = muldiv(a, b, c)
  if r > 0 then
    q = q + 1
  end
  return q
end

-- The algorithms. Each decides the request on one limit's state without
-- writing anything, and returns its decision and, when it admits the
-- request, a function that counts it: the writes wait until every limit
-- has admitted the request.

local NARGS = 9
local mode = ARGV[1]
local cost = tonumber(ARGV[2])
local now
if ARGV[3] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[3])
end
local perms = tonumber(ARGV[4])
local slack = tonumber(ARGV[5])

-- The arguments of the limit of KEYS[i].
local function limit(i)
  local o = 5 + (i - 1) * NARGS
  return {
    alg = tonumber(ARGV[o + 1]),
    count = tonumber(ARGV[o + 2]),
    period = tonumber(ARGV[o + 3]),
    burst = tonumber(ARGV[o + 4]),
    emission = tonumber(ARGV[o + 5]),
    tau = tonumber(ARGV[o + 6]),
    shaping = ARGV[o + 7] == '1',
    maxdelay = tonumber(ARGV[o + 8]),
    phase = tonumber(ARGV[o + 9]),
  }
end

-- PEXPIRE after the given time, in whole milliseconds rounded up, plus
-- the slack.
local function expire(key, after)
  redis.call('PEXPIRE', key, str(math.ceil(after / perms) + slack))
end

-- ZREM the members, in batches: unpack is bounded by the Lua stack.
local function zrem(key, members)
  for i = 1, #members, 1000 do
    redis.call('ZREM', key, unpack(members, i, math.min(i + 999, #members)))
  end
end

-- Token and leaky bucket (GCRA): the state is the theoretical arrival time
-- t and the emission interval e it was written with.
local function bucket(key, p)
  local emission, burst, tau, maxdelay = p.emission, p.burst, p.tau, p.maxdelay
  local st = redis.call('HMGET', key, 't', 'e')
  local tat = tonumber(st[1]) or now
  local was = tonumber(st[2])
  if was and was ~= emission and tat > now then
    -- The rate changed: keep the level in requests, capped at the burst.
    if floordiv(tat - now, was) >= burst then
      tat = now + tau
    else
      tat = now + muldivceil(tat - now, emission, was)
    end
  end
  local function bydelay(wait)
    if not p.shaping or maxdelay == 0 then
      return burst
    elseif wait > maxdelay then
      return 0
    end
    return floordiv(maxdelay - wait, emission) + 1
  end
  local t = tat
  if t < now then
    t = now
  end
  local nxt = t + cost * emission
  local allowat = nxt - tau
  local delay = 0
  if p.shaping then
    delay = t - now
    if maxdelay > 0 and delay > maxdelay and delay - maxdelay > allowat - now then
      allowat = now + delay - maxdelay
    end
  end
  if now < allowat then
    local rem = math.min(floordiv(tau - (t - now), emission), bydelay(t - now))
    return {0, rem, t - now, allowat - now, 0}
  end
  local rem = math.min(floordiv(tau - (nxt - now), emission), bydelay(nxt - now))
  return {1, rem, nxt - now, 0, delay}, function()
    redis.call('HSET', key, 't', str(nxt), 'e', str(emission))
    expire(key, nxt - now)
  end
end

-- The window algorithms: w is the index of the current window, c its
-- count, p the count of the window before, P the period they were cut by.
local function window(key, p)
  local count, period = p.count, p.period
  local st = redis.call('HMGET', key, 'w', 'c', 'p', 'P')
  local win = floordiv(now + p.phase, period)
  local start = win * period - p.phase
  local was = tonumber(st[1])
  local cur, prev = 0, 0
  if was and tonumber(st[4]) == period then
    if was == win then
      cur, prev = tonumber(st[2]) or 0, tonumber(st[3]) or 0
    elseif was == win - 1 then
      prev = tonumber(st[2]) or 0
    end
  end
  local function save(c, ttl)
    return function()
      redis.call('HSET', key, 'w', str(win), 'c', str(c), 'p', str(prev), 'P', str(period))
      expire(key, ttl)
    end
  end

  if p.alg == 3 then
    local left = start + period - now
    if cur + cost > count then
      return {0, count - cur, left, left, 0}
    end
    local reset = left
    if cur + cost == 0 then
      reset = 0
    end
    return {1, count - cur - cost, reset, 0, 0}, save(cur + cost, left)
  end

  -- Sliding window counter: admitted when cur + cost + prev x (P - e) / P
  -- is at most the limit.
  local elapsed = now - start
  local function reset(c)
    if c > 0 then
      return start + 2 * period - now
    elseif prev > 0 then
      return start + period - now
    end
    return 0
  end
  local free = count - cur - muldivceil(prev, period - elapsed, period)
  if cost > free then
    local retry
    local k = count - cur - cost
    if k >= 0 then
      retry = 0
      if k < prev then
        retry = start + period - muldiv(k, period, prev) - now
      end
    else
      k = count - cost
      local e = 0
      if k < cur then
        e = period - muldiv(k, period, cur)
      end
      retry = start + period + e - now
    end
    return {0, free, reset(cur), retry, 0}
  end
  return {1, free - cost, reset(cur + cost), 0, 0}, save(cur + cost, start + 2 * period - now)
end

-- Sliding window log: a sorted set of the admitted requests, scored by
-- time; an entry counts while now < score + period. Members are "time:n",
-- n counting the entries logged at the same instant from 0: the members
-- of one instant are always time:0 to time:(m-1), since entries expire
-- by the instant and a refund removes the last ones.
local function log(key, p)
  local count, period = p.count, p.period
  local live = '(' .. str(now - period)
  local used = redis.call('ZCOUNT', key, live, '+inf')
  local reset = 0
  if used > 0 then
    local newest = redis.call('ZREVRANGE', key, 0, 0, 'WITHSCORES')
    reset = tonumber(newest[2]) + period - now
  end
  if used + cost > count then
    local oldest = redis.call('ZRANGEBYSCORE', key, live, '+inf', 'WITHSCORES', 'LIMIT', used + cost - count - 1, 1)
    return {0, count - used, reset, tonumber(oldest[2]) + period - now, 0}
  end
  if cost == 0 then
    return {1, count - used, reset, 0, 0}
  end
  return {1, count - used - cost, period, 0, 0}, function()
    redis.call('ZREMRANGEBYSCORE', key, '-inf', str(now - period))
    local n = redis.call('ZCOUNT', key, str(now), str(now))
    -- In batches: unpack is bounded by the Lua stack.
    local args = {}
    for i = 0, cost - 1 do
      args[#args + 1] = str(now)
      args[#args + 1] = str(now) .. ':' .. str(n + i)
      if #args == 1000 or i == cost - 1 then
        redis.call('ZADD', key, unpack(args))
        args = {}
      end
    end
    expire(key, period)
  end
end

-- refund gives back a request of the given cost that a take admitted at
-- time now: a bucket its emission intervals, a window its count while the
-- window (or, for the counter, the window before) is the one it was
-- counted in, a log its last entries of that instant. TTLs stay: they are
-- only ever longer than the state needs.
local function refund(key, p)
  if p.alg == 1 or p.alg == 2 then
    local st = redis.call('HMGET', key, 't', 'e')
    local tat = tonumber(st[1])
    if tat then
      redis.call('HSET', key, 't', str(tat - cost * (tonumber(st[2]) or p.emission)))
    end
  elseif p.alg == 3 or p.alg == 5 then
    local st = redis.call('HMGET', key, 'w', 'c', 'p', 'P')
    local was = tonumber(st[1])
    if was and tonumber(st[4]) == p.period then
      local win = floordiv(now + p.phase, p.period)
      if was == win then
        redis.call('HSET', key, 'c', str(math.max((tonumber(st[2]) or 0) - cost, 0)))
      elseif was == win + 1 and p.alg == 5 then
        redis.call('HSET', key, 'p', str(math.max((tonumber(st[3]) or 0) - cost, 0)))
      end
    end
  elseif p.alg == 4 then
    local at = str(now)
    local n = redis.call('ZCOUNT', key, at, at)
    local members = {}
    for i = n - 1, math.max(n - cost, 0), -1 do
      members[#members + 1] = at .. ':' .. str(i)
    end
    zrem(key, members)
  end
end

local out = {now}
if mode == 'r' then
  if cost > 0 then
    for i = 1, #KEYS do
      refund(KEYS[i], limit(i))
    end
  end
  return out
end

local writes = {}
local all = true
for i = 1, #KEYS do
  local p = limit(i)
  local d, write
  if p.alg == 1 or p.alg == 2 then
    d, write = bucket(KEYS[i], p)
  elseif p.alg == 3 or p.alg == 5 then
    d, write = window(KEYS[i], p)
  elseif p.alg == 4 then
    d, write = log(KEYS[i], p)
  else
    return redis.error_reply('ratekit: unknown algorithm ' .. tostring(ARGV[5 + (i - 1) * NARGS + 1]))
  end
  for j = 1, 5 do
    out[#out + 1] = d[j]
  end
  all = all and d[1] == 1
  writes[i] = write
end
if mode == '1' and all and cost > 0 then
  for i = 1, #KEYS do
    writes[i]()
  end
end
return out
