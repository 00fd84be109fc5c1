-- ratekit: one rate-limit decision, run atomically inside Redis.
--
-- KEYS[1]  the state of one client under one limit
-- ARGV     algorithm, cost, commit (1 counts the request, 0 only looks),
--          now ("" reads Redis TIME, in microseconds), count, period,
--          burst, emission, tau, shaping (1/0), max delay, phase (added to
--          now before windows are cut), units per millisecond (for TTLs),
--          slack (milliseconds a key outlives its state)
--
-- Returns {allowed (1/0), remaining, reset, retry, delay}, times in the
-- caller's unit. The arithmetic is that of core/algo.go; the conformance
-- suite in core/storetest holds both to the same traces.
--
-- Lua numbers are doubles: integers are exact below 2^53. Times are
-- microseconds since the Unix epoch (about 2^51 today) or, under a test
-- clock, nanoseconds since a recent base; products that could pass 2^52
-- go through muldiv, which never forms them.
--
-- Every write sets a TTL in this same script: the moment the state is back
-- to full capacity, plus a slack, so that a key never outlives its meaning
-- for long and never expires while it still decides anything.

local key = KEYS[1]
local alg = tonumber(ARGV[1])
local cost = tonumber(ARGV[2])
local commit = ARGV[3] == '1'
local now
if ARGV[4] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[4])
end
local count = tonumber(ARGV[5])
local period = tonumber(ARGV[6])
local burst = tonumber(ARGV[7])
local emission = tonumber(ARGV[8])
local tau = tonumber(ARGV[9])
local shaping = ARGV[10] == '1'
local maxdelay = tonumber(ARGV[11])
local phase = tonumber(ARGV[12])
local perms = tonumber(ARGV[13])
local slack = tonumber(ARGV[14])

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

-- PEXPIRE after the given time, in whole milliseconds rounded up, plus
-- the slack.
local function expire(after)
  redis.call('PEXPIRE', key, str(math.ceil(after / perms) + slack))
end

-- Token and leaky bucket (GCRA): the state is the theoretical arrival time
-- t and the emission interval e it was written with.
if alg == 1 or alg == 2 then
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
    if not shaping or maxdelay == 0 then
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
  if shaping then
    delay = t - now
    if maxdelay > 0 and delay > maxdelay and delay - maxdelay > allowat - now then
      allowat = now + delay - maxdelay
    end
  end
  if now < allowat then
    local rem = math.min(floordiv(tau - (t - now), emission), bydelay(t - now))
    return {0, rem, t - now, allowat - now, 0}
  end
  if commit and cost > 0 then
    redis.call('HSET', key, 't', str(nxt), 'e', str(emission))
    expire(nxt - now)
  end
  local rem = math.min(floordiv(tau - (nxt - now), emission), bydelay(nxt - now))
  return {1, rem, nxt - now, 0, delay}
end

-- The window algorithms: w is the index of the current window, c its
-- count, p the count of the window before, P the period they were cut by.
if alg == 3 or alg == 5 then
  local st = redis.call('HMGET', key, 'w', 'c', 'p', 'P')
  local win = floordiv(now + phase, period)
  local start = win * period - phase
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
    redis.call('HSET', key, 'w', str(win), 'c', str(c), 'p', str(prev), 'P', str(period))
    expire(ttl)
  end

  if alg == 3 then
    local left = start + period - now
    if cur + cost > count then
      return {0, count - cur, left, left, 0}
    end
    if commit and cost > 0 then
      save(cur + cost, left)
    end
    local reset = left
    if cur + cost == 0 then
      reset = 0
    end
    return {1, count - cur - cost, reset, 0, 0}
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
  if commit and cost > 0 then
    save(cur + cost, start + 2 * period - now)
  end
  return {1, free - cost, reset(cur + cost), 0, 0}
end

-- Sliding window log: a sorted set of the admitted requests, scored by
-- time; an entry counts while now < score + period. Members are
-- "time:n", n counting the entries logged at the same instant.
if alg == 4 then
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
  if cost > 0 then
    if commit then
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
      expire(period)
    end
    reset = period
  end
  return {1, count - used - cost, reset, 0, 0}
end

return redis.error_reply('ratekit: unknown algorithm ' .. tostring(ARGV[1]))
