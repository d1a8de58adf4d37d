-- Ack: XACK + XDEL the entries this consumer owns with the given fence, in one step each.
-- XACK alone checks no owner: a stale worker's ack would delete the new owner's delivery.
-- KEYS: stream. ARGV: group, consumer, then id, fence pairs. Returns 1 (acked) / 0 (lost) per id.
local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local ids, flags = held(stream, group, consumer)
if #ids > 0 then
  redis.call('XACK', stream, group, unpack(ids))
  redis.call('XDEL', stream, unpack(ids))
end
return flags
