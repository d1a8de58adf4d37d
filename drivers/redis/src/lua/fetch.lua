-- Fetch for one consumer, atomically: promote the delayed messages that are due (see
-- delayed.lua), reclaim lapsed entries (cursor carried by the caller) and read new ones
-- (XREADGROUP >). The kind that goes first takes at most its share;
-- the other takes what is left; then the first may fill the rest, so neither starves the other
-- and a fetch returns whatever is available. Entries without the payload field can never be
-- processed: they go to the dead-letter stream at once (and the stream is trimmed as its
-- retention says: see retention.lua).
-- KEYS: stream, dead-letter stream, delayed set, wake stream, tenure hash
-- ARGV: group, consumer, min-idle ms, cursor, first share, max, payload field,
--       "1" if reclaims go first, max_len ('' = untrimmed), most delayed messages to promote,
--       the retention's mode, max_len and max_age
-- Returns {cursor, {id, delivery count, payload, ...}, last-delivered-id or false,
--          1 if anything was reclaimable else 0, {id of each entry dead-lettered here, ...},
--          ms until the next delayed message is due (0 if one is, -1 if none),
--          the wake stream's last id when it took nothing (where a wait blocks), else false,
--          the consumer's tenure, under which every entry returned was delivered}
local stream, dead, tenures = KEYS[1], KEYS[2], KEYS[5]
local group, consumer, min_idle, cursor = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local share, max, field = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local reclaim_first = ARGV[8] == '1'
local out, taken, undeliverable = {}, 0, {}

-- Due delayed messages join the stream first, so this very read can take them.
local due_wait = promote(stream, KEYS[3], field, ARGV[9], tonumber(ARGV[10]))

-- Reclaiming: XPENDING IDLE lists the lapsed entries (idle times only: XAUTOCLAIM would walk
-- each pending entry's stream node, live ones too, and scans at most 10 × COUNT of them), and
-- XCLAIM takes those, with their owners known (each loses its tenure: see tenure.lua) and the
-- new delivery count their count plus one. The cursor is the lapsed entry the previous fetch
-- listed but left ('0-0': none, start from the first lapsed entry), so lapsed entries are
-- reclaimed in turn; a scan never passes the live entries before the first lapsed one.
local first_idle = redis.call('XPENDING', stream, group, 'IDLE', min_idle, '-', '+', 1)[1]
local reclaimable = first_idle ~= nil
local start = false
if reclaimable then
  start = (cursor == '0-0' or before(cursor, first_idle[1])) and first_idle[1] or cursor
end

local function take(id, fields, count)
  for i = 1, #fields, 2 do
    if fields[i] == field then
      out[#out + 1] = id
      out[#out + 1] = count
      out[#out + 1] = fields[i + 1]
      taken = taken + 1
      return
    end
  end
  redis.call('XADD', dead, '*', 'id', id, 'reason', 'entry has no field "' .. field .. '"',
    'deliveries', count, unpack(fields))
  redis.call('XACK', stream, group, id)
  undeliverable[#undeliverable + 1] = id
end

local function reclaim(n)
  if n <= 0 or not start then return end
  local lapsed = redis.call('XPENDING', stream, group, 'IDLE', min_idle, start, '+', n + 1)
  -- '0-0' when the scan reached the end of the pending list: the next fetch starts over from
  -- the first lapsed entry.
  cursor = #lapsed > n and table.remove(lapsed)[1] or '0-0'
  start = cursor ~= '0-0' and cursor
  if #lapsed == 0 then return end
  -- Every entry listed leaves its owner's hands here: taken, or, deleted from the stream,
  -- dropped from the pending list by XCLAIM.
  local owners = {}
  for _, entry in ipairs(lapsed) do owners[entry[2]] = true end
  for owner in pairs(owners) do new_tenure(tenures, owner) end
  for from = 1, #lapsed, 1000 do
    local ids = {}
    for i = from, math.min(from + 999, #lapsed) do ids[#ids + 1] = lapsed[i][1] end
    local j = from
    for _, entry in ipairs(redis.call('XCLAIM', stream, group, consumer, min_idle, unpack(ids))) do
      while lapsed[j][1] ~= entry[1] do j = j + 1 end
      if entry[2] then take(entry[1], entry[2], lapsed[j][4] + 1) end
    end
  end
end

local function read_new(n)
  if n <= 0 then return end
  local read = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', n,
    'STREAMS', stream, '>')
  if read then
    for _, entry in ipairs(read[1][2]) do take(entry[1], entry[2], 1) end
  end
end

if not reclaimable then
  read_new(max)
elseif reclaim_first then
  reclaim(share)
  read_new(max - taken)
  reclaim(max - taken)
else
  read_new(share)
  reclaim(max - taken)
  read_new(max - taken)
end

if #undeliverable > 0 then
  local below, effective = retain(stream, ARGV[11], ARGV[12], ARGV[13])
  if effective == 'd' then
    for _, id in ipairs(undeliverable) do
      if not (below and before(id, below)) then redis.call('XDEL', stream, id) end
    end
  end
end

local last, wake = false, false
if taken == 0 then
  last = last_delivered(stream, group) or false
  wake = wake_id(KEYS[4])
end
return {cursor, out, last, reclaimable and 1 or 0, undeliverable, due_wait, wake,
  tenure(tenures, consumer)}
