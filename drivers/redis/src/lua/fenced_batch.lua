-- Shared by the batch scripts (prepended to ack.lua and renew.lua): which of the leases in
-- ARGV[5..] (id, fence pairs, ascending by id) this consumer still owns with that fence, found
-- with ONE ranged XPENDING over the batch's id span (ARGV[3] .. ARGV[4], computed by the
-- client, which sends only ids it could parse) instead of one per id.
-- Returns the ids that hold (ascending), and a 1/0 flag per lease in order.
local function held(stream, group, consumer)
  local counts = {}
  if #ARGV >= 5 then
    local pending = redis.call('XPENDING', stream, group, ARGV[3], ARGV[4], 1000000000,
      consumer)
    for _, entry in ipairs(pending) do counts[entry[1]] = entry[4] end
  end
  local ids, flags = {}, {}
  for i = 5, #ARGV, 2 do
    local id = ARGV[i]
    local count = counts[id]
    if count ~= nil and tonumber(count) == tonumber(ARGV[i + 1]) then
      ids[#ids + 1] = id
      flags[#flags + 1] = 1
    else
      flags[#flags + 1] = 0
    end
  end
  return ids, flags
end
