-- Ack: XACK + XDEL the entries this consumer owns with the given fence, in one step each.
-- XACK alone checks no owner: a stale worker's ack would delete the new owner's delivery.
-- KEYS: stream. ARGV: group, consumer, lowest id, highest id, then id, fence pairs ascending
-- by id. Returns 1 (acked) / 0 (lost) per id.
--
-- Deleting: XDEL finds each id by walking its stream node from the node's start, about a
-- node's length (100 entries) of work per id. Acks mostly cover the head of the stream (its
-- oldest live entries); those go with one exact XTRIM MINID, which drops whole nodes. It
-- removes exactly the acked ids that are the stream's first live entries, nothing else; the
-- rest go by XDEL.
local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local ids, flags = held(stream, group, consumer)
if #ids > 0 then
  redis.call('XACK', stream, group, unpack(ids))
  local first = 0
  local head = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)
  if head[1] and head[1][1] == ids[1] then
    -- The live entries from the stream's start that are acked here: ids[1 .. first].
    head = redis.call('XRANGE', stream, '-', '+', 'COUNT', #ids + 1)
    while first < #ids and head[first + 1] and head[first + 1][1] == ids[first + 1] do
      first = first + 1
    end
    if head[first + 1] then
      -- Entries below the next live one are exactly ids[1 .. first].
      redis.call('XTRIM', stream, 'MINID', '=', head[first + 1][1])
    else
      -- ids[1 .. first] are all the stream holds.
      redis.call('XTRIM', stream, 'MAXLEN', '=', 0)
    end
  end
  if first < #ids then
    redis.call('XDEL', stream, unpack(ids, first + 1))
  end
end
return flags
