-- Publish a batch with due times and deduplication keys, atomically and in order.
-- KEYS: stream, delayed set, delayed sequence, wake stream, then the deduplication key of each
--       message that has one, in order.
-- ARGV: payload field, max_len ('' = untrimmed), then three per message: due ('' = now,
--       '+<ms>' = this long from now, '@<Unix ms>' = then, both on the server's clock),
--       deduplication ttl in ms ('' = none), payload.
-- Returns {id, 1 if a duplicate else 0, ...}: a stream id, or 'delayed:<seq>' for a message
-- not due yet; for a duplicate, the id the first publish with that key returned.
--
-- A message whose key is held enqueues nothing. One due later than now goes to the delayed set;
-- when it is due earlier than everything there was, one entry on the wake stream (kept at one
-- entry) wakes the consumers blocked waiting, which then learn the new due time.
local stream, delayed, seq, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local field, max_len = ARGV[1], ARGV[2]
local out, next_key = {}, 5
local now, soonest, woken

for i = 3, #ARGV, 3 do
  local due, ttl, payload = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local key, id
  if ttl ~= '' then
    key = KEYS[next_key]
    next_key = next_key + 1
    id = redis.call('GET', key)
  end
  if id then
    out[#out + 1] = id
    out[#out + 1] = 1
  else
    local at
    if due ~= '' then
      now = now or server_now()
      if string.sub(due, 1, 1) == '+' then
        at = now + tonumber(string.sub(due, 2))
      else
        at = tonumber(string.sub(due, 2))
      end
    end
    if at and at > now then
      if soonest == nil then soonest = earliest(delayed) or math.huge end
      local n = redis.call('INCR', seq)
      redis.call('ZADD', delayed, at, string.format('%016d', n) .. ':' .. payload)
      if at < soonest then
        soonest = at
        woken = true
      end
      id = 'delayed:' .. string.format('%d', n)
    else
      id = append(stream, max_len, field, payload)
    end
    if key then redis.call('SET', key, id, 'PX', ttl) end
    out[#out + 1] = id
    out[#out + 1] = 0
  end
end
if woken then redis.call('XADD', wake, 'MAXLEN', 1, '*', 'due', soonest) end
return out
