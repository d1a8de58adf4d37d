-- Requeue one dead letter, atomically: append the entry it was (every field the dead-letter
-- stream copied from it, without the dead-letter bookkeeping) to the stream as a fresh
-- message, and delete it from the dead-letter stream. Gone already: nothing happens.
-- KEYS: stream, dead-letter stream. ARGV: the dead letter's id.
-- Returns the new entry's id, or false when the dead letter is gone.
local stream, dead, id = KEYS[1], KEYS[2], ARGV[1]
local entry = redis.call('XRANGE', dead, id, id)[1]
if not entry then
  return false
end
local fields, copy = entry[2], {}
-- The dead-letter stream writes id, reason and deliveries first, then the entry's own fields.
for i = 7, #fields, 2 do
  copy[#copy + 1] = fields[i]
  copy[#copy + 1] = fields[i + 1]
end
if #copy == 0 then
  return redis.error_reply('ERR dead letter ' .. id .. ' holds no fields of its entry')
end
local new_id = redis.call('XADD', stream, '*', unpack(copy))
redis.call('XDEL', dead, id)
return new_id
