-- One page of a status index: the states of the commands in it, in (score, id) order, after a
-- cursor. Entries whose state expired or left the status are skipped and removed.
-- KEYS[1] the status index
-- ARGV[1] state key prefix (`prefix .. id` is a state hash: same hash tag, same slot),
-- ARGV[2] status, ARGV[3] limit, ARGV[4] cursor score ('' from the start), ARGV[5] cursor id,
-- ARGV[6] most entries to look at
-- Returns {more, cursor score, cursor id, {state JSON, ...}}: more is 1 when a page may
-- follow, starting after the cursor.
local key, prefix, status = KEYS[1], ARGV[1], ARGV[2]
local limit, budget = tonumber(ARGV[3]), tonumber(ARGV[6])

-- a > b, byte by byte: how a sorted set orders members of equal score.
local function greater(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x > y
    end
  end
  return #a > #b
end

-- The rank of the first entry after the cursor: past the lower scores, then a binary search
-- among the entries of the cursor's score.
local rank = 0
if ARGV[4] ~= '' then
  local lo = redis.call('ZCOUNT', key, '-inf', '(' .. ARGV[4])
  local hi = lo + redis.call('ZCOUNT', key, ARGV[4], ARGV[4])
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if greater(redis.call('ZRANGE', key, mid, mid)[1], ARGV[5]) then
      hi = mid
    else
      lo = mid + 1
    end
  end
  rank = lo
end

local states, stale = {}, {}
local more, cursor_score, cursor_id = 0, '', ''
local last_score, last_id = '', ''
local seen_score, seen_id = '', ''
local scanned = 0
local done = false
while not done do
  local chunk = redis.call('ZRANGE', key, rank, rank + 99, 'WITHSCORES')
  if #chunk == 0 then
    break
  end
  rank = rank + #chunk / 2
  for i = 1, #chunk, 2 do
    local id, score = chunk[i], chunk[i + 1]
    if scanned >= budget then
      -- Enough work for one call: the next page starts after the last entry looked at.
      more, cursor_score, cursor_id = 1, seen_score, seen_id
      done = true
      break
    end
    scanned = scanned + 1
    local fields = redis.call('HMGET', prefix .. id, 'status', 'state')
    if fields[1] == status then
      if #states == limit then
        more, cursor_score, cursor_id = 1, last_score, last_id
        done = true
        break
      end
      states[#states + 1] = fields[2]
      last_score, last_id = score, id
    else
      stale[#stale + 1] = id
    end
    seen_score, seen_id = score, id
  end
end
for _, id in ipairs(stale) do
  redis.call('ZREM', key, id)
end
return {more, cursor_score, cursor_id, states}
