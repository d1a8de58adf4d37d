-- Compare-and-set of a command's state on its version; refreshes the TTL on success.
-- A missing (expired) state is a conflict: a write never resurrects it.
-- KEYS[1] state hash
-- ARGV[1] expected version, ARGV[2] new version, ARGV[3] state JSON, ARGV[4] TTL in ms
if redis.call('HGET', KEYS[1], 'v') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'state', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
