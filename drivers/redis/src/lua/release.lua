-- Release with a delay: iff owned with that fence, set the entry's idle time to
-- (claim timeout - delay) so anyone may reclaim it once the delay has passed. Delivered under
-- the consumer's tenure of now, it is owned with that fence (see tenure.lua); otherwise that is
-- read back.
-- KEYS: stream, tenure hash. ARGV: group, consumer, id, fence, idle ms, the tenure it was
-- delivered under (0: none known). Returns 1 (released) / 0 (lost).
local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local id, fence = ARGV[3], tonumber(ARGV[4])
if tonumber(ARGV[6]) ~= tenure(KEYS[2], consumer) then
  local pending = redis.call('XPENDING', stream, group, id, id, 1, consumer)
  if not (pending[1] and tonumber(pending[1][4]) == fence) then return 0 end
end
redis.call('XCLAIM', stream, group, consumer, 0, id, 'IDLE', ARGV[5], 'JUSTID')
return 1
