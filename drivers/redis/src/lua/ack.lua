-- Ack: XACK + XDEL the entries this consumer owns with the given fence, in one step each.
-- XACK alone checks no owner: a stale worker's ack would delete the new owner's delivery.
-- KEYS: stream, tenure hash. ARGV: as fenced_batch.lua reads them.
-- Returns the consumer's tenure, then the batch positions of the leases lost (none: all acked).
--
-- Deleting: XDEL finds each id by walking its stream node from the node's start, about a
-- node's length (100 entries) of work per id. But every entry this group was given (all up to
-- its last-delivered id) that is pending for no one any more has been acked or dead-lettered,
-- and both delete it: so the entries below the group's oldest pending one go with one exact
-- XTRIM MINID, which drops whole nodes. Only ids acked while an older entry is still pending
-- go by XDEL. (Like XDEL itself, this assumes the stream is consumed by this one group.)
local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local mine = tenure(KEYS[2], consumer)

local ids, from, to, lost = held(stream, group, consumer, 0, mine)
if to >= from then
  redis.call('XACK', stream, group, unpack(ids, from, to))
  local summary = redis.call('XPENDING', stream, group)
  local below
  if summary[1] > 0 then
    below = summary[2]
  else
    -- Nothing pending: everything delivered is done. (The largest id there is, 2^64-1 - 2^64-1,
    -- has no successor; then the trim stops just below it and XDEL takes it.)
    local last = last_delivered(stream, group)
    if last and last ~= '18446744073709551615-18446744073709551615' then
      below = after(last)
    end
  end
  if below then redis.call('XTRIM', stream, 'MINID', '=', below) end
  -- ids ascend: those at or above `below` are a suffix, found by bisection (each comparison
  -- parses two ids); none, usually (acks in order): one comparison says so.
  local first = from
  if below and before(ids[to], below) then
    first = to + 1
  elseif below then
    local lo, hi = from, to + 1
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if before(ids[mid], below) then lo = mid + 1 else hi = mid end
    end
    first = lo
  end
  if first <= to then redis.call('XDEL', stream, unpack(ids, first, to)) end
end
table.insert(lost, 1, mine)
return lost
