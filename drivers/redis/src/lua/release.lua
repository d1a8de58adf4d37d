-- Release with a delay: iff owned with that fence, set the entry's idle time to
-- (claim timeout - delay) so anyone may reclaim it once the delay has passed. No extra keys.
-- KEYS: stream. ARGV: group, consumer, id, fence, idle ms. Returns 1 (released) / 0 (lost).
local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local id, fence = ARGV[3], tonumber(ARGV[4])
local pending = redis.call('XPENDING', stream, group, id, id, 1, consumer)
if pending[1] and tonumber(pending[1][4]) == fence then
  redis.call('XCLAIM', stream, group, consumer, 0, id, 'IDLE', ARGV[5], 'JUSTID')
  return 1
end
return 0
