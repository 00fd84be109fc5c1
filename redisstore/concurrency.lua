-- The leases of one key of a concurrency limiter (concurrency.go): a
-- sorted set whose members are lease IDs, each scored by the time, in
-- milliseconds, at which it ends. One key per call, so it runs on any
-- Redis Cluster node that holds the key.
--
-- KEYS[1]  the set
-- ARGV[1]  'a' acquire, 'n' renew, 'r' release
-- ARGV[2]  the lease ID
-- ARGV[3]  the most leases held at once (acquire)
-- ARGV[4]  the lease TTL in milliseconds
-- ARGV[5]  the time in milliseconds, or '' for Redis TIME
-- ARGV[6]  the slack of the key's TTL past its last lease, in milliseconds
--
-- Answers {admitted or held (1 or 0), leases held}.
local key, op, id = KEYS[1], ARGV[1], ARGV[2]
if op == 'r' then
  redis.call('ZREM', key, id)
  return {0, 0}
end

local now = tonumber(ARGV[5])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local ttl = tonumber(ARGV[4])
local life = ttl + tonumber(ARGV[6])

-- Leases that ended are gone: their holders vanished without releasing.
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)

-- hold sets the lease to end ttl from now, and keeps the key at least
-- as long as its last lease (never shortening what another limiter of
-- the same name, with a longer TTL, set).
local function hold()
  redis.call('ZADD', key, now + ttl, id)
  local pttl = redis.call('PTTL', key)
  if pttl < life then
    redis.call('PEXPIRE', key, life)
  end
end

local held = redis.call('ZSCORE', key, id)
if op == 'n' then
  if not held then
    return {0, 0} -- released, or expired: never added again
  end
  hold()
  return {1, 0}
end

local n = redis.call('ZCARD', key)
if held then
  hold() -- a call sent again: the lease is renewed, not counted twice
  return {1, n}
end
if n >= tonumber(ARGV[3]) then
  return {0, n}
end
hold()
return {1, n + 1}
