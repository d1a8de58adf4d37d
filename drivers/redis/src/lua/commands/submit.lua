-- Atomic, idempotent submit: the state record, its status index entry and the stream entry are
-- written together, or (when the id exists) nothing is written and the existing state is
-- returned. (After index.lua.)
-- KEYS[1] state hash, KEYS[2] stream, KEYS[3..7] status indexes
-- ARGV[1] version, ARGV[2] state JSON, ARGV[3] TTL in ms, ARGV[4] entry field, ARGV[5] entry,
-- ARGV[6] command id, ARGV[7] status, ARGV[8] status time (the index score),
-- ARGV[9] state key prefix
local existing = redis.call('HGET', KEYS[1], 'state')
if existing then
  return {0, existing}
end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'state', ARGV[2], 'status', ARGV[7])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
-- Out of any index an expired state of the same id left it in.
move(ARGV[6], false, ARGV[7], ARGV[8])
redis.call('XADD', KEYS[2], '*', ARGV[4], ARGV[5])
sweep(ARGV[9])
return {1, false}
