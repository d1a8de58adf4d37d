-- Dead-letter: iff owned with that fence, copy the entry to the dead-letter stream with the
-- reason and delivery count, then XACK it and trim what the stream's retention lets go of
-- (see retention.lua; deleting the entry itself only when deleting on ack), atomically.
-- KEYS: stream, dead-letter stream. ARGV: group, consumer, id, fence, reason, then the
-- retention's mode, max_len and max_age.
-- Returns 1 (dead-lettered) / 0 (lost).
local stream, dead, group, consumer = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local id, fence = ARGV[3], tonumber(ARGV[4])
local pending = redis.call('XPENDING', stream, group, id, id, 1, consumer)
if not (pending[1] and tonumber(pending[1][4]) == fence) then
  return 0
end
local entry = redis.call('XRANGE', stream, id, id)
local fields = {}
if entry[1] then fields = entry[1][2] end
redis.call('XADD', dead, '*', 'id', id, 'reason', ARGV[5], 'deliveries', fence, unpack(fields))
redis.call('XACK', stream, group, id)
local below, effective = retain(stream, ARGV[6], ARGV[7], ARGV[8])
if effective == 'd' and not (below and before(id, below)) then redis.call('XDEL', stream, id) end
return 1
