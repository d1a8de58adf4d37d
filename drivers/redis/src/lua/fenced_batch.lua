-- Shared by the batch scripts (prepended to ack.lua and renew.lua): which of the leases in
-- ARGV[3..] (id, fence pairs) this consumer still owns with that fence, found with ONE ranged
-- XPENDING over the batch's id span instead of one per id.
-- Returns the ids that hold, and a 1/0 flag per lease in order.
local function held(stream, group, consumer)
  local function key(id)
    local ms, seq = string.match(id, '^(%d+)-(%d+)$')
    return tonumber(ms), tonumber(seq)
  end
  local function less(a, b)
    local ams, aseq = key(a)
    local bms, bseq = key(b)
    return ams < bms or (ams == bms and aseq < bseq)
  end
  local low, high
  for i = 3, #ARGV, 2 do
    local id = ARGV[i]
    if key(id) then
      if not low or less(id, low) then low = id end
      if not high or less(high, id) then high = id end
    end
  end
  local counts = {}
  if low then
    local pending = redis.call('XPENDING', stream, group, low, high, 1000000000, consumer)
    for _, entry in ipairs(pending) do counts[entry[1]] = entry[4] end
  end
  local ids, flags = {}, {}
  for i = 3, #ARGV, 2 do
    local id, fence = ARGV[i], tonumber(ARGV[i + 1])
    if counts[id] ~= nil and tonumber(counts[id]) == fence then
      ids[#ids + 1] = id
      flags[#flags + 1] = 1
    else
      flags[#flags + 1] = 0
    end
  end
  return ids, flags
end
