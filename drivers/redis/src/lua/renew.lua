-- Renew: reset the idle time of the entries this consumer owns with the given fence. XCLAIM
-- alone checks no owner (a late heartbeat would steal the entry back); JUSTID keeps the count.
-- KEYS: stream. ARGV: group, consumer, lowest id, highest id, then id, fence pairs ascending
-- by id. Returns 1 (kept) / 0 (lost) per id.
local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local ids, flags = held(stream, group, consumer)
if #ids > 0 then
  -- unpack() only expands in last position, so the ids go in a table with the other arguments.
  local args = {stream, group, consumer, 0}
  for _, id in ipairs(ids) do args[#args + 1] = id end
  args[#args + 1] = 'JUSTID'
  redis.call('XCLAIM', unpack(args))
end
return flags
