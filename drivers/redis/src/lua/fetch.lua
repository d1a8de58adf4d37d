-- Fetch for one consumer: reclaim lapsed entries (XAUTOCLAIM, cursor carried by the caller),
-- then read new ones (XREADGROUP >), atomically. Entries without the payload field can never
-- be processed: they go to the dead-letter stream at once.
-- KEYS: stream, dead-letter stream
-- ARGV: group, consumer, min-idle ms, cursor, reclaim max, max, payload field
-- Returns {cursor, {id, delivery count, payload, ...}, last-delivered-id or false}
local stream, dead = KEYS[1], KEYS[2]
local group, consumer, min_idle, cursor = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local reclaim_max, max, field = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local out, taken = {}, 0

local function take(id, fields, count)
  for i = 1, #fields, 2 do
    if fields[i] == field then
      out[#out + 1] = id
      out[#out + 1] = count
      out[#out + 1] = fields[i + 1]
      taken = taken + 1
      return
    end
  end
  redis.call('XADD', dead, '*', 'id', id, 'reason', 'entry has no field "' .. field .. '"',
    'deliveries', count, unpack(fields))
  redis.call('XACK', stream, group, id)
  redis.call('XDEL', stream, id)
end

if reclaim_max > 0 then
  local claimed = redis.call('XAUTOCLAIM', stream, group, consumer, min_idle, cursor,
    'COUNT', reclaim_max)
  cursor = claimed[1]
  for _, entry in ipairs(claimed[2]) do
    local pending = redis.call('XPENDING', stream, group, entry[1], entry[1], 1, consumer)
    if entry[2] and pending[1] then
      take(entry[1], entry[2], pending[1][4])
    end
  end
end
if max - taken > 0 then
  local read = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', max - taken,
    'STREAMS', stream, '>')
  if read then
    for _, entry in ipairs(read[1][2]) do
      take(entry[1], entry[2], 1)
    end
  end
end
local last = false
if taken == 0 then
  for _, info in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local name, id
    for i = 1, #info, 2 do
      if info[i] == 'name' then name = info[i + 1] end
      if info[i] == 'last-delivered-id' then id = info[i + 1] end
    end
    if name == group then last = id end
  end
end
return {cursor, out, last}
