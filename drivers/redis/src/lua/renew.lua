-- Renew: for each (id, fence), reset the idle time iff this consumer owns the entry and its
-- delivery count still equals the fence. XCLAIM alone checks no owner; XPENDING with a
-- consumer filter does. JUSTID keeps the delivery count.
-- KEYS: stream. ARGV: group, consumer, then id, fence pairs. Returns 1 (kept) / 0 (lost) per id.
local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local out = {}
for i = 3, #ARGV, 2 do
  local id, fence = ARGV[i], tonumber(ARGV[i + 1])
  local pending = redis.call('XPENDING', stream, group, id, id, 1, consumer)
  if pending[1] and tonumber(pending[1][4]) == fence then
    redis.call('XCLAIM', stream, group, consumer, 0, id, 'JUSTID')
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
