-- Remove consumers of dead workers: no pending entries and idle for at least ARGV[2] ms.
-- A consumer with pending entries is never removed (DELCONSUMER would discard its PEL).
-- Each goes from the wake stream's group of the same name too, where a consumer holds nothing
-- but wake-ups it may have failed to acknowledge (the group may not exist: pcall).
-- Its tenure goes too (a consumer of that name made later gets a new one: see tenure.lua).
-- KEYS: stream, wake stream, tenure hash. ARGV: group, min idle ms, this consumer.
-- Returns the number removed.
local stream, group, min_idle, me = KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[3]
local removed = 0
for _, info in ipairs(redis.call('XINFO', 'CONSUMERS', stream, group)) do
  local name, pending, idle
  for i = 1, #info, 2 do
    if info[i] == 'name' then name = info[i + 1] end
    if info[i] == 'pending' then pending = info[i + 1] end
    if info[i] == 'idle' then idle = info[i + 1] end
  end
  if name ~= me and pending == 0 and idle >= min_idle then
    redis.call('XGROUP', 'DELCONSUMER', stream, group, name)
    redis.pcall('XGROUP', 'DELCONSUMER', KEYS[2], group, name)
    redis.call('HDEL', KEYS[3], name)
    removed = removed + 1
  end
end
return removed
