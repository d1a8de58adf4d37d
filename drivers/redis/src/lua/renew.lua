-- Renew: reset the idle time of the entries this consumer owns with the given fence. XCLAIM
-- alone checks no owner (a late heartbeat would steal the entry back); JUSTID keeps the count.
-- KEYS: stream, tenure hash. ARGV: as fenced_batch.lua reads them, then JUSTID (the tail
-- passed on to XCLAIM: unpack() only expands in last position, so the ids go there with it).
-- Returns the consumer's tenure, 0 (no flags: the ack script's reply has the same shape), then
-- the batch positions of the leases lost (none: all kept).
local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local mine = tenure(KEYS[2], consumer)
local ids, from, to, lost = held(stream, group, consumer, 1, mine)
if to >= from then
  if ids == ARGV then
    redis.call('XCLAIM', stream, group, consumer, 0, unpack(ARGV, from, to + 1))
  else
    ids[to + 1] = 'JUSTID'
    redis.call('XCLAIM', stream, group, consumer, 0, unpack(ids, from, to + 1))
  end
end
table.insert(lost, 1, 0)
table.insert(lost, 1, mine)
return lost
