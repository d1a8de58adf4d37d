-- Shared by the batch scripts (prepended to ack.lua and renew.lua, after ids.lua and
-- tenure.lua): which of a batch of leases this consumer still owns with their fence. When the
-- batch was delivered under the consumer's tenure of now, all of them (see tenure.lua: nothing
-- is read); otherwise found with ONE ranged XPENDING over the batch's id span.
-- ARGV: group, consumer, the tenure every lease of the batch was delivered under (0: not one
-- tenure, or none known), lowest id, highest id, then the number of fence runs r, r pairs
-- (fence, how many leases in a row have it), then the ids ascending (canonical: the client
-- sends only ids it could parse as such), then `tail` arguments of the script's own. Runs keep
-- fences out of ARGV: a batch of fresh deliveries is one run (fence 1), so no string per lease
-- is made or parsed for them.
-- Where the time goes: turning the XPENDING reply into Lua tables costs more than XPENDING
-- itself, so nothing else here is done per lease beyond comparing two strings (equal strings
-- are one object in Lua) and two numbers: the reply and the ids both ascend, so they are
-- walked side by side, no table is built, and ids are only compared by value (`before`) where
-- this consumer has pending entries inside the span that are not in the batch.
-- Returns `ids, from, to, lost`: the ids that hold are ids[from..to] (ascending; ARGV itself
-- when every lease holds, the usual case, so they are passed on with unpack and no table is
-- built per lease), and the batch positions (1-based, in ARGV order) of the leases lost.
local function held(stream, group, consumer, tail, mine)
  local runs = tonumber(ARGV[6])
  local first = 7 + 2 * runs
  local last = #ARGV - tail
  local lost, nlost = {}, 0
  if last < first or tonumber(ARGV[3]) == mine then return ARGV, first, last, lost end
  local pending = redis.call('XPENDING', stream, group, ARGV[4], ARGV[5], 1000000000, consumer)
  local j, entry = 1, pending[1]
  -- The previous id and its delivery count here (false: not pending for this consumer), for
  -- an id named twice in a row.
  local prev, prev_count = nil, false
  local x = first
  for r = 0, runs - 1 do
    local fence = tonumber(ARGV[7 + 2 * r])
    local stop = x + tonumber(ARGV[8 + 2 * r]) - 1
    for y = x, stop do
      local id = ARGV[y]
      if id ~= prev then
        -- Owner: XPENDING returned only this consumer's entries. Skip those below the id.
        while entry and entry[1] ~= id and before(entry[1], id) do
          j = j + 1
          entry = pending[j]
        end
        if entry and entry[1] == id then
          prev_count = entry[4]
          j = j + 1
          entry = pending[j]
        else
          prev_count = false
        end
        prev = id
      end
      -- Fence: both are numbers.
      if prev_count ~= fence then
        nlost = nlost + 1
        lost[nlost] = y - first + 1
      end
    end
    x = stop + 1
  end
  if nlost == 0 then return ARGV, first, last, lost end
  local ids, kept, l = {}, 0, 1
  for y = first, last do
    if lost[l] == y - first + 1 then
      l = l + 1
    else
      kept = kept + 1
      ids[kept] = ARGV[y]
    end
  end
  return ids, 1, kept, lost
end
