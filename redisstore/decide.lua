-- ratekit: decisions on one client by every limit of a limiter, each run
-- atomically inside Redis, all or nothing; or the refund of a request.
--
-- This file is the body of a Redis Function library (FUNCTION LOAD, then
-- FCALL: the chunk runs once, at load) and of an EVAL script, for servers
-- where Functions cannot be used; library.go adds the header and the footer
-- of each. Nothing here runs at load but local definitions.
--
-- One call runs a batch of decisions (many, at the end), each on its own
-- client's keys. Per decision, four arguments:
--
-- spec     the limits, as the store bound them: units per millisecond
--          (for TTLs), slack (milliseconds a key outlives its state), then
--          per limit that keeps state (a limit of 0 requests keeps none:
--          the caller decides it) nine integers: algorithm, count, period,
--          burst, emission, tau, shaping (1/0), max delay, phase (added to
--          now before windows are cut); all separated by spaces. A
--          library keeps the specs it parsed (a few, one per limiter), so
--          that a decision converts no number but its cost.
-- mode     '1' take: decide, and count when every limit admits; '0'
--          peek: decide only; 'i' inspect: peek, with each key's grant
--          and existence; 'x' reset: delete the keys; 'g<ttl>' grant:
--          add cost to each key's grant, expiring ttl from now; 'r<flags>'
--          refund, flags holding per key '1' when the take was paid from
--          the key's grant, '0' otherwise
-- cost     the request's cost
-- now      '' reads Redis TIME (once per batch), in microseconds; for a
--          refund, the time its take returned; under a test clock, the
--          clock's time
--
-- KEYS holds the keys of every decision in turn, one per limit of its
-- spec, all of a decision's under the same hash tag, so in one Redis
-- Cluster slot.
--
-- The answer is one flat array of integers, per decision in turn: a
-- status, the time of the decision, and, for a take or a peek with status
-- 1, five integers per key: allowed (1, 2 when paid from the key's grant,
-- 0), remaining (grant included), reset, retry, delay, times in the
-- caller's unit; an inspect adds three per key: the grant, the time it
-- expires in, and 1 when the key exists. A reset answers 1 when it deleted
-- a key; a grant with status 3 answers the index of a key whose capacity
-- it would exceed and the grant it holds. Status 1: decided (or refunded,
-- reset, granted); 0: run as
-- the function that may write when Redis is out of memory (full = true),
-- a take that would create a key and that its existing keys all admit,
-- which writes nothing (a rejection by an existing key answers status 1;
-- new keys are the caller's); 2: a key of the decision holds a
-- value of the wrong type, and nothing was written. One decision's
-- failure is not the others'. Integers only: the client reads them into
-- one array, with no value to box per number.
--
-- The arithmetic is that of core/algo.go; the conformance suite in
-- core/storetest holds both to the same traces.
--
-- State is one integer per key, which Redis keeps in the smallest form a
-- value has: a bucket's theoretical arrival time; a window's index modulo
-- WMOD plus WMOD times its count (plus WMOD * PREV times the previous
-- window's count, for the sliding window counter). Counts too large to
-- pack are kept as the text "window count previous". A sliding window log
-- is a sorted set.
--
-- A grant an operator gave a key (Limiter.Grant) follows the state in its
-- text, " g<amount> <expiry>", so that a key without one reads as a plain
-- number; in a sliding window log it is the member "g<amount> <expiry>"
-- scored +inf, which the log's counts leave out. A request whose cost the
-- grant covers is paid from it, and the limit counts nothing. A grant
-- used up stays, at 0, until it expires, so that a refund can give back.
--
-- Lua numbers are doubles: integers are exact below 2^53. Times are
-- microseconds since the Unix epoch (about 2^51 today) or, under a test
-- clock, nanoseconds since a recent base; products that could pass 2^52
-- go through muldiv, which never forms them. Numbers given to redis.call
-- are written with 17 significant digits, so integers below 2^53 are
-- written exactly and need no string.format; the common take (take, at
-- the end) still formats its two with '%d', which Redis 7.0 turns into
-- arguments for less than its own '%.17g'.
--
-- Every write sets a TTL in the same command (SET ... PX): the moment the
-- state is back to full capacity, plus a slack, so that a key never
-- outlives its meaning for long and never expires while it still decides
-- anything. One write does not: a take on Redis TIME that adds to the
-- count of the window a key already holds (INCRBY), whose TTL, set when
-- that window's state was written, already runs to the moment the window
-- no longer counts.

-- The globals the code uses, as locals, set by bind on the first call: a
-- library cannot reach them while it loads.
local floor, ceil, min, max, format, gmatch, match, sub
local call, try -- redis.call and redis.pcall

local function bind()
  floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
  format, gmatch, match, sub = string.format, string.gmatch, string.match, string.sub
  call, try = redis.call, redis.pcall
end

local function str(n)
  return format('%d', n)
end

-- floor(a / b) for b > 0, corrected for the rounding of the division.
local function floordiv(a, b)
  local q = floor(a / b)
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

-- The algorithms.

local WMOD = 262144 -- 2^18 windows tell a window from the ones a key can outlive
local WMODTEXT = '262144'
local PREV = 131072 -- 2^17: counts below it pack with the previous window's
local FIXMAX = 34359738368 -- 2^35: fixed window counts below it pack

-- wrong reports an answer of redis.pcall that is an error (a key of the
-- wrong type): decisions end without writing.
local function wrong(v)
  return type(v) == 'table' and v.err ~= nil
end

-- The specs parsed, by their text; emptied when it holds MAXSPECS.
local specs, nspecs, MAXSPECS = {}, 0, 64

-- spec returns the limits of spec text s: a table with perms, slack and,
-- per limit, a table of its numbers.
local function spec(s)
  local sp = specs[s]
  if sp then
    return sp
  end
  local n = {}
  for w in gmatch(s, '%S+') do
    n[#n + 1] = tonumber(w)
  end
  sp = {perms = n[1], slack = n[2], n = (#n - 2) / 9}
  for i = 1, sp.n do
    local o = 2 + (i - 1) * 9
    sp[i] = {alg = n[o + 1], count = n[o + 2], period = n[o + 3], burst = n[o + 4], emission = n[o + 5],
      tau = n[o + 6], shaping = n[o + 7] == 1, maxdelay = n[o + 8], phase = n[o + 9]}
  end
  if nspecs >= MAXSPECS then
    specs, nspecs = {}, 0
  end
  specs[s], nspecs = sp, nspecs + 1
  return sp
end

-- The TTL of a state that is back to full capacity after the given time:
-- whole milliseconds rounded up, plus the slack.
local function ttl(after, sp)
  return ceil(after / sp.perms) + sp.slack
end

-- Token and leaky bucket (GCRA). The state is the theoretical arrival
-- time; a level beyond the burst (the limit was lowered) is capped at it.
-- Takes the state v (nil for none) and returns the decision (allowed,
-- remaining, reset, retry, delay) and, when the request is admitted, the
-- state to write and its TTL.
local function bucket(v, l, now, cost, sp)
  local tau, emission = l.tau, l.emission
  local tat = tonumber(v or now) or now
  if tat > now + tau then
    tat = now + tau
  end
  local t = tat
  if t < now then
    t = now
  end
  local nxt = t + cost * emission
  local allowat = nxt - tau
  local delay = 0
  local shaping, maxdelay = l.shaping, l.maxdelay
  if shaping then
    delay = t - now
    if maxdelay > 0 and delay > maxdelay and delay - maxdelay > allowat - now then
      allowat = now + delay - maxdelay
    end
  end
  -- The requests a full bucket still admits, and those a shaping bucket's
  -- max delay admits after a wait.
  local wait = t - now
  if now >= allowat then
    wait = nxt - now
  end
  local rem = floordiv(tau - wait, emission)
  if shaping and maxdelay > 0 then
    if wait > maxdelay then
      rem = 0
    else
      rem = min(rem, floordiv(maxdelay - wait, emission) + 1)
    end
  elseif rem > l.burst then
    rem = l.burst
  end
  if now < allowat then
    return 0, rem, t - now, allowat - now, 0
  end
  return 1, rem, nxt - now, 0, delay, nxt, ttl(nxt - now, sp)
end

-- unpackwindow returns the window of state v (modulo the returned
-- modulus when packed, whole when the modulus is nil), its count and the
-- previous window's count.
local function unpackwindow(v, fixed)
  local n = tonumber(v)
  if n then
    local w = n % WMOD
    local rest = (n - w) / WMOD
    if fixed then
      return w, rest, 0, WMOD
    end
    local c = rest % PREV
    return w, c, (rest - c) / PREV, WMOD
  end
  local w, c, p = match(v, '^(%d+) (%d+) (%d+)$')
  return tonumber(w), tonumber(c), tonumber(p), nil
end

-- same reports whether the window w of a state is window win.
local function same(w, mod, win)
  if mod then
    return w == win % mod
  end
  return w == win
end

-- readwindow returns the count of window win and of the one before it
-- from a window state v.
local function readwindow(v, win, fixed)
  if not v then
    return 0, 0
  end
  local w, c, p, mod = unpackwindow(v, fixed)
  if same(w, mod, win) then
    return c, p
  elseif same(w, mod, win - 1) then
    return 0, c
  end
  return 0, 0
end

-- packwindow returns the state of window win with counts c and p.
local function packwindow(win, c, p, fixed)
  if fixed and c < FIXMAX then
    return win % WMOD + WMOD * c
  elseif not fixed and c < PREV and p < PREV then
    return win % WMOD + WMOD * (c + PREV * p)
  end
  return str(win) .. ' ' .. str(c) .. ' ' .. str(p)
end

-- Fixed window (alg 3) and sliding window counter (alg 5), on state v.
local function window(v, l, now, cost, sp)
  local count, period, fixed = l.count, l.period, l.alg == 3
  local win = floordiv(now + l.phase, period)
  local start = win * period - l.phase
  local cur, prev = readwindow(v, win, fixed)
  if fixed then
    local left = start + period - now
    if cur + cost > count then
      return 0, count - cur, left, left, 0
    end
    local reset = left
    if cur + cost == 0 then
      reset = 0
    end
    return 1, count - cur - cost, reset, 0, 0, packwindow(win, cur + cost, 0, true), ttl(left, sp)
  end

  -- Sliding window counter: admitted when cur + cost + prev x (P - e) / P
  -- is at most the limit.
  local elapsed = now - start
  local free = count - cur - muldivceil(prev, period - elapsed, period)
  local c = cur
  if cost <= free then
    c = cur + cost
  end
  local reset = 0
  if c > 0 then
    reset = start + 2 * period - now
  elseif prev > 0 then
    reset = start + period - now
  end
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
    return 0, free, reset, retry, 0
  end
  return 1, free - cost, reset, 0, 0, packwindow(win, c, prev, false), ttl(start + 2 * period - now, sp)
end

-- Sliding window log (alg 4): a sorted set of the admitted requests,
-- scored by time; an entry counts while now < score + period. Members are
-- "time:n", n counting the entries logged at the same instant from 0: the
-- members of one instant are always time:0 to time:(m-1), since entries
-- expire by the instant and a refund removes the last ones. It writes
-- itself, in logwrite, once every limit has admitted the request.
local function log(key, l, now, cost)
  local count, period = l.count, l.period
  local live = '(' .. str(now - period)
  local used = call('ZCOUNT', key, live, '(+inf')
  local reset = 0
  if used > 0 then
    local newest = call('ZREVRANGEBYSCORE', key, '(+inf', '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    reset = tonumber(newest[2]) + period - now
  end
  if used + cost > count then
    local oldest = call('ZRANGEBYSCORE', key, live, '+inf', 'WITHSCORES', 'LIMIT', used + cost - count - 1, 1)
    return 0, count - used, reset, tonumber(oldest[2]) + period - now, 0
  end
  if cost == 0 then
    return 1, count - used, reset, 0, 0
  end
  return 1, count - used - cost, period, 0, 0, true
end

local function logwrite(key, l, now, cost, sp, expiry)
  call('ZREMRANGEBYSCORE', key, '-inf', str(now - l.period))
  local at = str(now)
  local n = call('ZCOUNT', key, at, at)
  -- In batches: unpack is bounded by the Lua stack.
  local args = {}
  for i = 0, cost - 1 do
    args[#args + 1] = at
    args[#args + 1] = at .. ':' .. str(n + i)
    if #args == 1000 or i == cost - 1 then
      call('ZADD', key, unpack(args))
      args = {}
    end
  end
  call('PEXPIRE', key, ttl(max(l.period, expiry - now), sp))
end

-- Grants. split returns the state of a value in text, without its grant,
-- and the grant's amount and expiry (0 and 0 for none).
local function split(v)
  local base, g, e = match(v, '^(.-) g(%d+) (%d+)$')
  if not base then
    return v, 0, 0
  end
  if base == '' then
    base = nil
  end
  return base, tonumber(g), tonumber(e)
end

-- read returns a key's state without its grant (nil for none),
-- the grant's amount and expiry (0 and 0 for none) and, for a log, the
-- grant's member; or the error of a key of the wrong type.
local function read(key, l)
  if l.alg == 4 then
    local m = try('ZRANGEBYSCORE', key, '+inf', '+inf')
    if wrong(m) then
      return m
    end
    if m[1] then
      local g, e = match(m[1], '^g(%d+) (%d+)$')
      return nil, tonumber(g), tonumber(e), m[1]
    end
    return nil, 0, 0
  end
  local v = try('GET', key)
  if wrong(v) or not v or tonumber(v) then
    return v, 0, 0
  end
  return split(v)
end

-- text returns the value of state v (a number, text or nil) with grant g
-- expiring at e, if it has not expired by now; nil when there is nothing.
local function text(v, g, e, now)
  if type(v) == 'number' then
    v = str(v)
  end
  if e <= now then
    return v
  end
  return (v or '') .. ' g' .. str(g) .. ' ' .. str(e)
end

-- setgrant writes grant g expiring at e beside state v (read's), keeping
-- the key's TTL unless the grant outlives it.
local function setgrant(key, l, v, g, e, member, now, sp)
  if l.alg == 4 then
    if member then
      call('ZREM', key, member)
    end
    if e > now then
      call('ZADD', key, '+inf', 'g' .. str(g) .. ' ' .. str(e))
    end
  else
    local t = text(v, g, e, now)
    if not t then
      call('DEL', key)
      return
    end
    call('SET', key, t, 'KEEPTTL')
  end
  local left = call('PTTL', key)
  local need = ttl(e - now, sp)
  if left >= 0 and left < need then
    call('PEXPIRE', key, need)
  end
end

-- refund gives back a request of the given cost that a take admitted at
-- time now: to the key's grant when the take was paid from it; otherwise
-- a bucket its emission intervals, a window its count while the window
-- (or, for the counter, the window before) is the one it was counted in,
-- a log its last entries of that instant. TTLs stay: they are only ever
-- longer than the state needs. v, g, e and member are what read returned
-- for the key.
local function refund(key, l, now, cost, granted, sp, v, g, e, member)
  local alg = l.alg
  if granted then
    if e > now then
      setgrant(key, l, v, g + cost, e, member, now, sp)
    end
  elseif alg == 1 or alg == 2 then
    local tat = tonumber(v or '')
    if tat then
      call('SET', key, text(tat - cost * l.emission, g, e, now), 'KEEPTTL')
    end
  elseif alg == 3 or alg == 5 then
    if not v then
      return
    end
    local fixed = alg == 3
    local win = floordiv(now + l.phase, l.period)
    local w, c, p, mod = unpackwindow(v, fixed)
    if same(w, mod, win) then
      call('SET', key, text(packwindow(win, max(c - cost, 0), p, fixed), g, e, now), 'KEEPTTL')
    elseif not fixed and same(w, mod, win + 1) then
      call('SET', key, text(packwindow(win + 1, c, max(p - cost, 0), false), g, e, now), 'KEEPTTL')
    end
  elseif alg == 4 then
    local at = str(now)
    local n = call('ZCOUNT', key, at, at)
    local members = {}
    for i = n - 1, max(n - cost, 0), -1 do
      members[#members + 1] = at .. ':' .. str(i)
    end
    for i = 1, #members, 1000 do
      call('ZREM', key, unpack(members, i, min(i + 999, #members)))
    end
  end
end

-- capacity is the most requests limit l admits at once (core's
-- Params.Capacity).
local function capacity(l)
  if l.shaping and l.maxdelay > 0 then
    return min(l.burst, floordiv(l.maxdelay, l.emission) + 1)
  end
  return l.burst
end

-- What a decision read and will write, per key.
local bases, grants, expiries, members, paid, vals, ttls = {}, {}, {}, {}, {}, {}, {}

-- operate runs a reset, a grant or a refund on keys[k0 + 1 .. k0 + sp.n]
-- and appends its answer to out, whose length is n; it returns the new
-- length.
local function operate(keys, k0, sp, mode, cost, now, out, n)
  local nk, op = sp.n, sub(mode, 1, 1)
  out[n + 1], out[n + 2] = 1, now
  if op == 'x' then
    out[n + 3] = min(call('DEL', unpack(keys, k0 + 1, k0 + nk)), 1)
    return n + 3
  end
  for i = 1, nk do
    local v, g, e, member = read(keys[k0 + i], sp[i])
    if wrong(v) then
      out[n + 1] = 2
      return n + 2
    end
    if e <= now then
      g = 0
    end
    bases[i], grants[i], expiries[i], members[i] = v, g, e, member
  end
  if op == 'r' then
    if cost > 0 then
      for i = 1, nk do
        refund(keys[k0 + i], sp[i], now, cost, sub(mode, i + 1, i + 1) == '1', sp,
          bases[i], grants[i], expiries[i], members[i])
      end
    end
    return n + 2
  end
  -- A grant.
  for i = 1, nk do
    if grants[i] + cost > capacity(sp[i]) then
      out[n + 1], out[n + 3], out[n + 4] = 3, i - 1, grants[i]
      return n + 4
    end
  end
  local e = now + tonumber(sub(mode, 2))
  for i = 1, nk do
    setgrant(keys[k0 + i], sp[i], bases[i], grants[i] + cost, e, members[i], now, sp)
  end
  return n + 2
end

-- decide runs one decision on keys[k0 + 1 .. k0 + sp.n] and appends its
-- answer to out, whose length is n; it returns the new length.
local function decide(keys, k0, sp, mode, cost, now, full, out, n)
  local nk = sp.n
  if mode ~= '1' and mode ~= '0' and mode ~= 'i' then
    return operate(keys, k0, sp, mode, cost, now, out, n)
  end
  -- Out of memory, a take that would create a key is decided by its
  -- existing keys alone, writing nothing: one of them that rejects it
  -- answers (a client over one limit stays over it); if they all admit,
  -- the caller decides it in process.
  local missing = full and mode == '1' and cost > 0 and call('EXISTS', unpack(keys, k0 + 1, k0 + nk)) < nk

  out[n + 1], out[n + 2] = 1, now
  local m = n + 2
  local all = true
  for i = 1, nk do
    local key, l = keys[k0 + i], sp[i]
    local alg = l.alg
    local v, g, e, member
    if alg == 4 then
      v, g, e, member = read(key, l)
    else
      -- read's, with the common case first: a number, or no key.
      v, g, e = try('GET', key), 0, 0
      if v and not tonumber(v) and not wrong(v) then
        v, g, e = split(v)
      end
    end
    if wrong(v) then
      for j = n + 3, m do
        out[j] = nil
      end
      out[n + 1] = 2
      return n + 2
    end
    if e <= now then
      g = 0
    end
    expiries[i] = e
    if e > 0 then
      bases[i], grants[i], members[i] = v, g, member
    end
    local c = cost
    paid[i] = cost > 0 and g >= cost
    if paid[i] then
      c = 0
    end
    local ok, rem, reset, retry, delay
    if alg == 1 or alg == 2 then
      ok, rem, reset, retry, delay, vals[i], ttls[i] = bucket(v, l, now, c, sp)
    elseif alg == 3 or alg == 5 then
      ok, rem, reset, retry, delay, vals[i], ttls[i] = window(v, l, now, c, sp)
    elseif alg == 4 then
      ok, rem, reset, retry, delay, vals[i] = log(key, l, now, c)
    else
      error('ratekit: unknown algorithm ' .. tostring(alg))
    end
    if paid[i] then
      ok, rem, retry, delay = 2, max(rem, 0) + g - cost, 0, 0
    elseif g > 0 then
      rem = max(rem, 0) + g
    end
    out[m + 1], out[m + 2], out[m + 3], out[m + 4], out[m + 5] = ok, rem, reset, retry, delay
    m = m + 5
    if mode == 'i' then
      local left, exists = 0, 0
      if e > now then
        left = e - now
      end
      if v or e > 0 or (alg == 4 and call('EXISTS', key) == 1) then
        exists = 1
      end
      out[m + 1], out[m + 2], out[m + 3] = g, left, exists
      m = m + 3
    end
    all = all and ok > 0
  end
  if missing then
    if all then
      for j = n + 3, m do
        out[j] = nil
      end
      out[n + 1] = 0
      return n + 2
    end
    return m
  end
  if mode == '1' and all and cost > 0 then
    for i = 1, nk do
      local key, l, v, e = keys[k0 + i], sp[i], vals[i], expiries[i]
      local g = e > 0 and grants[i] or 0
      if paid[i] then
        setgrant(key, l, bases[i], g - cost, e, members[i], now, sp)
      elseif v == true then
        logwrite(key, l, now, cost, sp, e)
      elseif e > now then
        call('SET', key, text(v, g, e, now), 'PX', max(ttls[i], ttl(e - now, sp)))
      elseif v then
        call('SET', key, v, 'PX', ttls[i])
      end
    end
  end
  return m
end

-- take runs the common decision, a take by one bucket or window limit l
-- of spec sp on key, as decide does, and answers it; or answers nil,
-- having written nothing, when the key holds anything but a number (a
-- grant, counts kept as text, a value of the wrong type), for decide.
-- servertime tells that now is Redis TIME, the clock of the keys' TTLs.
local function take(key, l, sp, cost, now, servertime)
  local v = try('GET', key)
  local n = tonumber(v)
  if v and not n then
    return nil
  end
  local ok, rem, reset, retry, delay, val, t
  if l.alg <= 2 then
    ok, rem, reset, retry, delay, val, t = bucket(n, l, now, cost, sp)
  else
    ok, rem, reset, retry, delay, val, t = window(n, l, now, cost, sp)
  end
  if ok == 1 and cost > 0 then
    if servertime and n and l.alg >= 3 and val == n + WMOD * cost then
      -- The same window, counting cost more: the key's TTL, set by the
      -- SET ... PX that wrote this window's state (a refund keeps it),
      -- already runs to the moment the window no longer counts, so that
      -- adding to the count is enough. (Under a test clock, whose time
      -- is not Redis's, every take sets the TTL again, as decide does.)
      if cost == 1 then
        call('INCRBY', key, WMODTEXT)
      else
        call('INCRBY', key, str(WMOD * cost))
      end
    else
      if type(val) == 'number' then
        val = format('%d', val)
      end
      call('SET', key, val, 'PX', format('%d', t))
    end
  end
  return {1, now, ok, rem, reset, retry, delay}
end

-- many runs a batch of decisions, each atomic (the batch is, too), four
-- arguments each, and answers the integers of each in turn.
local function many(keys, argv, full)
  if not call then
    bind()
  end
  local clock
  -- A batch of one take by one limit other than a log, nearly every call,
  -- runs take, unless the key holds more than a number. (Out of memory,
  -- and before the time base of a test clock, decide handles it.)
  if #argv == 4 and argv[2] == '1' and not full then
    local sp = specs[argv[1]] or spec(argv[1])
    local l = sp[1]
    if sp.n == 1 and l.alg ~= 4 then
      local now = argv[4]
      if now == '' then
        local t = call('TIME')
        clock = t[1] * 1000000 + t[2]
        now = clock
      else
        now = tonumber(now)
      end
      if now >= 0 then
        local cost = argv[3]
        if cost == '1' then
          cost = 1
        else
          cost = tonumber(cost)
        end
        local out = take(keys[1], l, sp, cost, now, clock ~= nil)
        if out then
          return out
        end
      end
    end
  end
  local out, n, k0 = {}, 0, 0
  for a = 1, #argv, 4 do
    local sp, mode, cost, now = spec(argv[a]), argv[a + 1], tonumber(argv[a + 2]), argv[a + 3]
    if now == '' then
      if not clock then
        local t = call('TIME')
        clock = t[1] * 1000000 + t[2]
      end
      now = clock
    else
      now = tonumber(now)
    end
    n = decide(keys, k0, sp, mode, cost, now, full, out, n)
    k0 = k0 + sp.n
  end
  return out
end
