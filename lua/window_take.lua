-- One take in a sliding window (StateStore.windowTake): KEYS[1] is a sorted set of the takes'
-- times. ARGV: limit, window in ms, a unique member. Returns -1 when taken, else the ms until
-- the oldest take leaves the window. The store's clock, so that replicas' clocks do not matter.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return window - (now - tonumber(oldest[2]))
end
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('PEXPIRE', KEYS[1], window)
return -1
