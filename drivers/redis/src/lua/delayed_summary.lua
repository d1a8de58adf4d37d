-- How many delayed messages wait, and when the next is due, on the server's clock.
-- KEYS: delayed set. Returns {count, ms until the next is due (0 if one is), or -1 if none}.
local count = redis.call('ZCARD', KEYS[1])
if count == 0 then return {0, -1} end
return {count, due_in(KEYS[1], server_now())}
