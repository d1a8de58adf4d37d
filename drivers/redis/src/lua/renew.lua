-- Renew: reset the idle time of the entries this consumer owns with the given fence. XCLAIM
-- alone checks no owner (a late heartbeat would steal the entry back); JUSTID keeps the count.
-- KEYS: stream. ARGV: as fenced_batch.lua reads them.
-- Returns the batch positions of the leases lost (none: all kept).
local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local ids, kept, lost = held(stream, group, consumer)
if kept > 0 then
  -- unpack() only expands in last position: JUSTID goes at the end of the id table.
  ids[kept + 1] = 'JUSTID'
  redis.call('XCLAIM', stream, group, consumer, 0, unpack(ids, 1, kept + 1))
end
return lost
