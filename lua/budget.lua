-- A byte budget shared by replicas (StateStore.budget*). KEYS: [1] a hash of holders' reserved
-- bytes, [2] a sorted set of reservation leases (holder -> expiry), [3] a sorted set of kept
-- entries (entry -> expiry; all live as long, so it is also their age order), [4] a hash of
-- entries' bytes, [5] a hash of the totals ("kept", "reserved").
-- ARGV[1] is the operation, then its arguments:
--   reserve holder bytes max leaseMs prefixes    -> 1, or 0 when reservations alone leave no room
--                                                   (an evicted entry's keys are each of the
--                                                   space-separated prefixes followed by its id)
--   keep holder entry bytes ttlMs                -> the entry's expiry (ms since the epoch)
--   release holder bytes(-1: all)                -> 1
--   use                                          -> {kept, reserved}
local reserved_by, leases, kept, sizes, totals = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function total(field) return tonumber(redis.call('HGET', totals, field) or '0') end

local function release(holder, bytes)
  local have = tonumber(redis.call('HGET', reserved_by, holder) or '0')
  local given = have
  if bytes >= 0 and bytes < have then given = bytes end
  redis.call('HINCRBY', totals, 'reserved', -given)
  if have - given > 0 then
    redis.call('HSET', reserved_by, holder, have - given)
  else
    redis.call('HDEL', reserved_by, holder)
    redis.call('ZREM', leases, holder)
  end
end

-- Reservations whose holder stopped renewing (its replica died) and entries past their expiry
-- (whose keys the store already dropped) give their bytes back.
for _, holder in ipairs(redis.call('ZRANGEBYSCORE', leases, '-inf', now)) do release(holder, -1) end
for _, entry in ipairs(redis.call('ZRANGEBYSCORE', kept, '-inf', now)) do
  redis.call('HINCRBY', totals, 'kept', -tonumber(redis.call('HGET', sizes, entry) or '0'))
  redis.call('HDEL', sizes, entry)
  redis.call('ZREM', kept, entry)
end

local op = ARGV[1]
if op == 'reserve' then
  local holder, bytes, max = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
  local lease_ms, prefixes = tonumber(ARGV[5]), ARGV[6]
  if total('reserved') + bytes > max then return 0 end
  while total('kept') + total('reserved') + bytes > max do
    local oldest = redis.call('ZRANGE', kept, 0, 0)
    if #oldest == 0 then break end
    local entry = oldest[1]
    redis.call('HINCRBY', totals, 'kept', -tonumber(redis.call('HGET', sizes, entry) or '0'))
    redis.call('HDEL', sizes, entry)
    redis.call('ZREM', kept, entry)
    for prefix in string.gmatch(prefixes, '%S+') do redis.call('DEL', prefix .. entry) end
  end
  redis.call('HINCRBY', reserved_by, holder, bytes)
  redis.call('HINCRBY', totals, 'reserved', bytes)
  redis.call('ZADD', leases, now + lease_ms, holder)
  return 1
elseif op == 'keep' then
  local holder, entry, bytes, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
  release(holder, bytes)
  redis.call('HSET', sizes, entry, bytes)
  redis.call('HINCRBY', totals, 'kept', bytes)
  redis.call('ZADD', kept, now + ttl, entry)
  return now + ttl
elseif op == 'release' then
  release(ARGV[2], tonumber(ARGV[3]))
  return 1
elseif op == 'use' then
  return {total('kept'), total('reserved')}
end
return redis.error_reply('unknown budget operation ' .. tostring(op))
