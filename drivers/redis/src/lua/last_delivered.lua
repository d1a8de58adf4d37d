-- Shared by the ack and fetch scripts (prepended to them): the group's last-delivered id, from
-- XINFO GROUPS, or nil when the group does not exist.
local function last_delivered(stream, group)
  for _, info in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local name, id
    for i = 1, #info, 2 do
      if info[i] == 'name' then name = info[i + 1] end
      if info[i] == 'last-delivered-id' then id = info[i + 1] end
    end
    if name == group then return id end
  end
end
