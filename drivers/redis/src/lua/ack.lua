-- Ack: for each (id, fence), XACK + XDEL iff this consumer owns the entry with that fence.
-- XACK alone checks no owner: a stale worker's ack would delete the new owner's delivery.
-- KEYS: stream. ARGV: group, consumer, then id, fence pairs. Returns 1 (acked) / 0 (lost) per id.
local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local out = {}
for i = 3, #ARGV, 2 do
  local id, fence = ARGV[i], tonumber(ARGV[i + 1])
  local pending = redis.call('XPENDING', stream, group, id, id, 1, consumer)
  if pending[1] and tonumber(pending[1][4]) == fence then
    redis.call('XACK', stream, group, id)
    redis.call('XDEL', stream, id)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
