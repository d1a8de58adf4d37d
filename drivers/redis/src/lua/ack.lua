-- Ack: XACK the entries this consumer owns with the given fence, then trim what the stream's
-- retention lets go of (see retention.lua). XACK alone checks no owner: a stale worker's ack
-- would remove the new owner's delivery from the pending list.
-- KEYS: stream, tenure hash. ARGV: as fenced_batch.lua reads them, then the retention's mode,
-- max_len and max_age (three tail arguments).
-- Returns the consumer's tenure, 1 when delete-on-ack found another group on the stream (and
-- trimmed only what every group consumed) else 0, then the batch positions of the leases lost
-- (none: all acked).
--
-- Deleting on ack (mode 'd'): XDEL finds each id by walking its stream node from the node's
-- start, about a node's length (100 entries) of work per id, while the trim below the group's
-- oldest pending entry drops whole nodes. So only ids acked while an older entry is still
-- pending go by XDEL.
local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local mode, max_len, max_age = ARGV[#ARGV - 2], ARGV[#ARGV - 1], ARGV[#ARGV]
local mine = tenure(KEYS[2], consumer)

local shared = 0
local ids, from, to, lost = held(stream, group, consumer, 3, mine)
if to >= from then
  redis.call('XACK', stream, group, unpack(ids, from, to))
  local below, effective = retain(stream, mode, max_len, max_age)
  if mode == 'd' and effective ~= 'd' then shared = 1 end
  if effective == 'd' then
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
end
table.insert(lost, 1, shared)
table.insert(lost, 1, mine)
return lost
