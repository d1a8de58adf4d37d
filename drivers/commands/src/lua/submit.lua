-- Atomic, idempotent submit: the state record and the stream entry are written together, or
-- (when the id exists) nothing is written and the existing state is returned.
-- KEYS[1] state hash, KEYS[2] stream
-- ARGV[1] version, ARGV[2] state JSON, ARGV[3] TTL in ms, ARGV[4] entry field, ARGV[5] entry
local existing = redis.call('HGET', KEYS[1], 'state')
if existing then
  return {0, existing}
end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'state', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('XADD', KEYS[2], '*', ARGV[4], ARGV[5])
return {1, false}
