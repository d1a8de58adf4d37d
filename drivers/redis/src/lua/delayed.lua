-- Shared by the publish, promote, fetch and delayed-summary scripts (prepended to them).
-- A delayed message waits in a sorted set (score = its due time in Unix ms on the server's
-- clock; member = '<seq, 16 digits>:<payload>', so equal due times keep their publish order)
-- until a fetch moves it into the stream.

-- The server's clock, Unix ms.
local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Appends a payload to the stream, trimmed to about max_len entries ('' = untrimmed).
local function append(stream, max_len, field, payload)
  if max_len == '' then
    return redis.call('XADD', stream, '*', field, payload)
  end
  return redis.call('XADD', stream, 'MAXLEN', '~', max_len, '*', field, payload)
end

-- The due time of the earliest delayed message, or nil when there is none.
local function earliest(delayed)
  local first = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
  if first[2] then return tonumber(first[2]) end
end

-- Ms from `now` until the earliest delayed message is due (0 if it is), or -1 if none.
local function due_in(delayed, now)
  local first = earliest(delayed)
  if not first then return -1 end
  return math.max(0, first - now)
end

-- Moves up to `limit` due messages into the stream, earliest first, and removes them from the
-- set in the same script: each is promoted exactly once however many consumers race. Returns
-- ms until the next one is due (0: more are due already; -1: none left). With nothing delayed
-- it costs one ZRANGE.
local function promote(stream, delayed, field, max_len, limit)
  local first = earliest(delayed)
  if not first then return -1 end
  local now = server_now()
  if first > now then return first - now end
  local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, limit)
  -- The hot loop of a large promotion: no lookups beyond the one call per message. A member is
  -- 16 digits, a colon, then the payload.
  local call = redis.call
  if max_len == '' then
    for i = 1, #due do
      call('XADD', stream, '*', field, string.sub(due[i], 18))
    end
  else
    for i = 1, #due do
      call('XADD', stream, 'MAXLEN', '~', max_len, '*', field, string.sub(due[i], 18))
    end
  end
  -- They are the set's first #due members: remove them by rank, without looking them up.
  redis.call('ZREMRANGEBYRANK', delayed, 0, #due - 1)
  return due_in(delayed, now)
end

-- The wake stream's last id, '0-0' when it has none: a consumer about to wait blocks for
-- entries after it, so it sees every wake-up from then on.
local function wake_id(wake)
  local last = redis.call('XREVRANGE', wake, '+', '-', 'COUNT', 1)[1]
  return last and last[1] or '0-0'
end
