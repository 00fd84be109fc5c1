-- The hybrid store's script (sync.go sends it). Every operation is idempotent or
-- guarded by a sequence number, so that a call whose answer was lost can
-- be sent again without counting twice.
--
-- A window hash holds one window of one client under one limit:
--   e        epoch: raised by a reset, which voids what servers held
--   t        this region's count: the sum of the servers' fields
--   n        this region's servers that hold a field
--   v        version of t, raised whenever t changes (for replication)
--   i<id>    a server's count: what it admitted, plus what it leased
--   s<id>    the sequence number of that server's last write
--   L        the largest limit a server of this region counts the window
--            under: no other region can have admitted more
--   R, N     the sum of the other regions' counts (each within [0, L]) and
--            servers
--   r<reg>, c<reg>, V<reg>  one other region's count (never below 0),
--            servers, version
-- A grant hash holds a client's grant under one limit:
--   g gen, a amount, U used (sum of u<id>), x expiry (ms), n servers,
--   u<id>, q<id>  a server's used-or-leased amount and sequence number

local function num(x) return tonumber(x) or 0 end

-- within returns x as an integer within [0, hi] (hi 0: no upper bound).
local function within(x, hi)
  x = math.max(0, math.floor(x))
  if hi > 0 and x > hi then return hi end
  return x
end

-- othersWithin sums the other regions' counts of window hash k, each
-- clamped to [0, hi]: what R holds once a server of this region has told
-- the window's limit.
local function othersWithin(k, hi)
  local sum = 0
  local h = redis.call('HGETALL', k)
  for i = 1, #h, 2 do
    if string.sub(h[i], 1, 1) == 'r' then sum = sum + within(num(h[i + 1]), hi) end
  end
  return sum
end

-- lease returns what a server asking for at least cost, and expecting to
-- use up to most, may take of free, shared with n servers.
local function lease(free, cost, most, n)
  if cost <= 0 or free < cost then return 0 end
  return math.min(free, math.max(cost, math.min(most, math.floor(free / math.max(n, 1)))))
end

-- window: mine is the server's count to write (-1: keep what the hash
-- holds, for a server that does not know it), epoch the epoch the server
-- counted under, cap the count the window may reach with a lease, top the
-- largest limit the server counts the window under (0: unknown).
local function window(k, id, seq, ttl, epoch, mine, cap, cost, most, top)
  local f, s = 'i' .. id, 's' .. id
  local h = redis.call('HMGET', k, 'e', 't', 'R', 'n', 'N', 'v', f, s, 'L')
  local e, t, R, n, N, v = num(h[1]), num(h[2]), num(h[3]), num(h[4]), num(h[5]), num(h[6])
  if top > num(h[9]) then -- a limit told first, or raised: other regions' counts within it
    R = othersWithin(k, top)
    redis.call('HSET', k, 'L', top, 'R', R)
  end
  local old = tonumber(h[7])
  local new = old or 0
  if old == nil then n = n + 1 end
  local last = num(h[8])
  if mine >= 0 and epoch == e then
    if seq <= last then return {e, t, R, n, N, old or 0, 0, v} end -- a late copy
    new = mine
  end
  local got = lease(cap - (t - (old or 0) + new + R), cost, most, n + N)
  local nt = t - (old or 0) + new + got
  if nt ~= t then v = v + 1 end
  redis.call('HSET', k, f, new + got, s, math.max(seq, last), 't', nt, 'n', n, 'v', v, 'e', e)
  redis.call('PEXPIRE', k, ttl)
  return {e, nt, R, n, N, new, got, v}
end

local function grant(k, id, seq, gen, used, cost, most, now)
  local f, q = 'u' .. id, 'q' .. id
  local h = redis.call('HMGET', k, 'g', 'a', 'U', 'x', 'n', f, q)
  local g = num(h[1])
  if g == 0 then return {0, 0, 0, 0, 0, 0, 0, 0} end
  local a, U, x, n = num(h[2]), num(h[3]), num(h[4]), num(h[5])
  local old = tonumber(h[6])
  local new = old or 0
  if old == nil then n = n + 1 end
  local last = num(h[7])
  if used >= 0 and gen == g then
    if seq <= last then return {g, a, U, x, old or 0, 0, 0, 0} end -- a late copy
    new = used
  end
  local got = 0
  if x > now then got = lease(a - (U - (old or 0) + new), cost, most, n) end
  local nU = U - (old or 0) + new + got
  redis.call('HSET', k, f, new + got, q, math.max(seq, last), 'U', nU, 'n', n)
  return {g, a, nU, x, new, got, 0, 0}
end

-- sync: ARGV id, seq, now (ms), then 8 per key: kind ('w' or 'g'), and
-- for a window ttl, epoch, mine, cap, cost, most, top; for a grant gen,
-- used, cost, most and three unused slots. Eight integers per key come
-- back, then Redis's clock (seconds, microseconds) when it can be read:
-- the servers take their windows from it.
local function sync(keys, argv)
  local id, seq, now = argv[1], tonumber(argv[2]), tonumber(argv[3])
  local out = {}
  for i, k in ipairs(keys) do
    local a = 4 + (i - 1) * 8
    local r
    if argv[a] == 'w' then
      r = window(k, id, seq, tonumber(argv[a + 1]), tonumber(argv[a + 2]), tonumber(argv[a + 3]),
        tonumber(argv[a + 4]), tonumber(argv[a + 5]), tonumber(argv[a + 6]), tonumber(argv[a + 7]))
    else
      r = grant(k, id, seq, tonumber(argv[a + 1]), tonumber(argv[a + 2]), tonumber(argv[a + 3]),
        tonumber(argv[a + 4]), now)
    end
    for j = 1, 8 do out[#out + 1] = r[j] end
  end
  -- Last, after every write (older Redis refuses a write after TIME); a
  -- Redis that refuses TIME in scripts leaves the servers on their clocks.
  local ok, t = pcall(redis.call, 'TIME')
  if ok then
    out[#out + 1] = tonumber(t[1])
    out[#out + 1] = tonumber(t[2])
  end
  return out
end

-- ownFields lists the fields of a hash that belong to this region's
-- servers (prefix p1 or p2).
local function ownFields(k, p1, p2)
  local fs = {}
  for _, f in ipairs(redis.call('HKEYS', k)) do
    local c = string.sub(f, 1, 1)
    if c == p1 or c == p2 then fs[#fs + 1] = f end
  end
  return fs
end

-- reset: ARGV ttl (ms) per key; keys are window hashes then grant hashes
-- ('w' or 'g' in ARGV too). Clears this region's counts and the grant,
-- raising epochs so that servers drop what they hold. Returns 1 when
-- anything was counted or granted.
local function reset(keys, argv)
  local found = 0
  for i, k in ipairs(keys) do
    local kind, ttl = argv[2 * i - 1], tonumber(argv[2 * i])
    if redis.call('EXISTS', k) == 1 then
      if kind == 'w' then
        local h = redis.call('HMGET', k, 'e', 't', 'v')
        if num(h[2]) > 0 then found = 1 end
        local fs = ownFields(k, 'i', 's')
        if #fs > 0 then redis.call('HDEL', k, unpack(fs)) end
        redis.call('HSET', k, 'e', num(h[1]) + 1, 't', 0, 'n', 0, 'v', num(h[3]) + 1)
        redis.call('PEXPIRE', k, ttl)
      else
        local h = redis.call('HMGET', k, 'g', 'a', 'U')
        if num(h[2]) > num(h[3]) then found = 1 end
        local fs = ownFields(k, 'u', 'q')
        if #fs > 0 then redis.call('HDEL', k, unpack(fs)) end
        redis.call('HSET', k, 'g', num(h[1]) + 1, 'a', 0, 'U', 0, 'x', 0, 'n', 0)
        redis.call('PEXPIRE', k, ttl)
      end
    end
  end
  return found
end

-- give: ARGV now (ms), amount, ttl (ms), then a capacity per key. Adds
-- amount to every key's grant, or none of them when one would hold more
-- than its capacity (returns 3).
local function give(keys, argv)
  local now, amount, ttl = tonumber(argv[1]), tonumber(argv[2]), tonumber(argv[3])
  local hs = {}
  for i, k in ipairs(keys) do
    local h = redis.call('HMGET', k, 'g', 'a', 'U', 'x')
    local left = 0
    if num(h[4]) > now then left = num(h[2]) - num(h[3]) end
    if left + amount > tonumber(argv[3 + i]) then return 3 end
    hs[i] = h
  end
  for i, k in ipairs(keys) do
    local h = hs[i]
    if num(h[4]) > now then
      redis.call('HSET', k, 'a', num(h[2]) + amount, 'x', now + ttl)
    else
      local fs = ownFields(k, 'u', 'q')
      if #fs > 0 then redis.call('HDEL', k, unpack(fs)) end
      redis.call('HSET', k, 'g', num(h[1]) + 1, 'a', amount, 'U', 0, 'x', now + ttl, 'n', 0)
    end
    redis.call('PEXPIRE', k, ttl + 60000)
  end
  return 1
end

-- merge: ARGV region, then 4 per key: version, count, servers, ttl (ms).
-- Takes another region's count of a window when it is newer than the
-- one held: replays and reordering change nothing. Whatever a region
-- sends, its count is held within [0, L] (what it could have admitted)
-- and its servers within [0, maxServers].
local maxServers = 1000000
local function merge(keys, argv)
  local reg = argv[1]
  for i, k in ipairs(keys) do
    local a = 2 + (i - 1) * 4
    local ver, cnt, srv, ttl = num(argv[a]), num(argv[a + 1]), num(argv[a + 2]), num(argv[a + 3])
    local h = redis.call('HMGET', k, 'V' .. reg, 'r' .. reg, 'c' .. reg, 'R', 'N', 'L')
    if h[1] == false or ver > num(h[1]) then
      local L = num(h[6])
      cnt, srv = within(cnt, 0), within(srv, maxServers)
      redis.call('HSET', k, 'V' .. reg, ver, 'r' .. reg, cnt, 'c' .. reg, srv,
        'R', num(h[4]) - within(num(h[2]), L) + within(cnt, L), 'N', num(h[5]) - within(num(h[3]), maxServers) + srv)
      if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
    end
  end
  return 1
end

local ops = {s = sync, x = reset, g = give, m = merge}
local op = ARGV[1]
local rest = {}
for i = 2, #ARGV do rest[#rest + 1] = ARGV[i] end
return ops[op](KEYS, rest)
