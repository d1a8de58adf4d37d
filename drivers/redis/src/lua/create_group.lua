-- Creates the stream's group (from the stream's start) and the wake stream's group of the same
-- name (from its end), each unless it exists. A group made anew starts every tenure afresh (see
-- tenure.lua): a delivery made under a deleted group of that name is vouched for no more.
-- KEYS: stream, wake stream, tenure hash. ARGV: group.
-- Returns, for a group made anew, how many entries the stream had removed before (trimmed or
-- deleted: that group never sees them); else 0.
local removed = 0
local created = redis.pcall('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
if type(created) == 'table' and created.err then
  if not string.find(created.err, 'BUSYGROUP', 1, true) then return created end
else
  redis.call('DEL', KEYS[3])
  local info = redis.call('XINFO', 'STREAM', KEYS[1])
  local length, added = 0, 0
  for i = 1, #info, 2 do
    if info[i] == 'length' then length = info[i + 1] end
    if info[i] == 'entries-added' then added = info[i + 1] end
  end
  removed = added - length
end
local woken = redis.pcall('XGROUP', 'CREATE', KEYS[2], ARGV[1], '$', 'MKSTREAM')
if type(woken) == 'table' and woken.err and not string.find(woken.err, 'BUSYGROUP', 1, true) then
  return woken
end
return removed
