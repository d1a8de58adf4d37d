-- Shared by the scripts that ack or dead-letter entries (prepended to them, after ids.lua): the
-- stream's retention (see retention.rs). An entry goes only when every consumer group of the
-- stream is done with it, by one XTRIM MINID below the first entry some group still needs;
-- never by XDEL above a group's position, which would hide the entry from a group yet to read
-- it and make XINFO GROUPS report that group's lag as unknown. Except in mode 'd' (delete on
-- ack, for a stream one group reads), where the caller also XDELs what it acked.

-- The first entry some group of the stream still needs: the lowest, over the groups, of the
-- group's oldest pending entry, or else the entry after its last-delivered one. Every entry
-- below it was delivered to every group and acked (or skipped by XGROUP SETID). nil when the
-- stream has no group. Also the number of groups.
local function needed(stream)
  local floor, groups = nil, 0
  for _, info in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    groups = groups + 1
    local name, pending, last
    for i = 1, #info, 2 do
      local key = info[i]
      if key == 'name' then name = info[i + 1]
      elseif key == 'pending' then pending = info[i + 1]
      elseif key == 'last-delivered-id' then last = info[i + 1] end
    end
    local from
    if pending > 0 then
      from = redis.call('XPENDING', stream, name)[2]
    elseif last == '18446744073709551615-18446744073709551615' then
      -- The largest id there is has no successor: it stays.
      from = last
    else
      from = after(last)
    end
    if not floor or before(from, floor) then floor = from end
  end
  return floor, groups
end

-- Mode 'k': the first entry the caps keep (max_len newest, none older than max_age ms by its
-- id's time on the server's clock), or nil when they keep everything. A stream far above its
-- length cap comes down by at most 1000 entries a call.
local function capped(stream, max_len, max_age)
  local point
  if max_age ~= '' then
    local now = redis.call('TIME')
    local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - tonumber(max_age)
    if ms > 0 then point = string.format('%.0f-0', ms) end
  end
  if max_len ~= '' then
    local excess = redis.call('XLEN', stream) - tonumber(max_len)
    if excess > 0 then
      local range = redis.call('XRANGE', stream, '-', '+', 'COUNT', math.min(excess, 1000))
      local last = range[#range][1]
      if last ~= '18446744073709551615-18446744073709551615' then
        local id = after(last)
        if not point or before(point, id) then point = id end
      end
    end
  end
  return point
end

-- Trims what the retention lets go of. mode: 'c' consumed, 'k' keep (with its caps, '' none),
-- 'd' delete on ack. Returns the first entry kept (nil: none trimmed) and the mode in effect:
-- 'c' for 'd' when the stream has another group, whose entries an XDEL would take.
local function retain(stream, mode, max_len, max_age)
  local floor, groups = needed(stream)
  if not floor then return nil, mode end
  if mode == 'd' and groups > 1 then mode = 'c' end
  if mode == 'k' then
    local cap = capped(stream, max_len, max_age)
    if not cap then return nil, mode end
    if before(cap, floor) then floor = cap end
  end
  redis.call('XTRIM', stream, 'MINID', '=', floor)
  return floor, mode
end
