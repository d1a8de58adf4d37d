-- A sharded queue's membership: the member heartbeats, members silent for the ttl are
-- forgotten, and the live ones are answered. Scored by the server's clock, so workers with
-- skewed clocks agree on who is live.
-- KEYS[1] the membership sorted set ({queue}:members)
-- ARGV[1] the member (its consumer name), ARGV[2] the ttl in milliseconds
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
-- Live: heard of less than the ttl ago (score > now - ttl).
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
-- The set goes away by itself once nobody heartbeats.
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return redis.call('ZRANGE', KEYS[1], 0, -1)
