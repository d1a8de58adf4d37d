-- Compare-and-set of a command's state on its version; refreshes the TTL and moves the command
-- between the status indexes on success; with an entry, also enqueues it (a requeue). A
-- missing (expired) state is a conflict: a write never resurrects it. (After index.lua.)
-- KEYS[1] state hash, KEYS[2] stream, KEYS[3..7] status indexes
-- ARGV[1] expected version, ARGV[2] new version, ARGV[3] state JSON, ARGV[4] TTL in ms,
-- ARGV[5] command id, ARGV[6] status, ARGV[7] status time (the index score);
-- to requeue: ARGV[8] entry field, ARGV[9] entry
if redis.call('HGET', KEYS[1], 'v') ~= ARGV[1] then
  return 0
end
local old = redis.call('HGET', KEYS[1], 'status')
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'state', ARGV[3], 'status', ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
move(ARGV[5], old, ARGV[6], ARGV[7])
if ARGV[8] then
  redis.call('XADD', KEYS[2], '*', ARGV[8], ARGV[9])
end
return 1
