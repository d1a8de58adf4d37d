-- Shared by the batch scripts (prepended to ack.lua and renew.lua): which of a batch of leases
-- this consumer still owns with their fence, found with ONE ranged XPENDING over the batch's id
-- span instead of one per id.
-- ARGV: group, consumer, lowest id, highest id, then the number of fence runs r, r pairs
-- (fence, how many leases in a row have it), then the ids ascending (the client sends only
-- ids it could parse). Runs keep fences out of ARGV: a batch of fresh deliveries is one run
-- (fence 1), so no string per lease is made or parsed for them.
-- Where the time goes: turning the XPENDING reply into Lua tables costs more than XPENDING
-- itself, so nothing else here is done per lease beyond one table lookup and a number compare.
-- Returns the ids that hold (ascending), how many, and the batch positions (1-based, in
-- ARGV order) of the leases lost.
local function held(stream, group, consumer)
  local runs = tonumber(ARGV[5])
  local first = 6 + 2 * runs
  local counts = {}
  if #ARGV >= first then
    local pending = redis.call('XPENDING', stream, group, ARGV[3], ARGV[4], 1000000000,
      consumer)
    for j = 1, #pending do
      local entry = pending[j]
      counts[entry[1]] = entry[4]
    end
  end
  local ids, kept, lost, nlost = {}, 0, {}, 0
  local i = first
  for r = 0, runs - 1 do
    local fence = tonumber(ARGV[6 + 2 * r])
    local last = i + tonumber(ARGV[7 + 2 * r]) - 1
    for x = i, last do
      local id = ARGV[x]
      -- Owner: XPENDING returned only this consumer's entries. Fence: both are numbers.
      if counts[id] == fence then
        kept = kept + 1
        ids[kept] = id
      else
        nlost = nlost + 1
        lost[nlost] = x - first + 1
      end
    end
    i = last + 1
  end
  return ids, kept, lost
end
