-- Shared by the scripts that deliver, settle or drop entries (prepended to them): consumers'
-- tenures. A group's tenure hash (field: consumer, value: its tenure) changes a consumer's
-- tenure whenever an entry leaves its hands other than by its own fenced scripts: taken over,
-- or dropped from its pending list by a reclaim that found it deleted. While a consumer's tenure
-- is the one a delivery was made under, that delivery is still pending for it with the same
-- delivery count (its fence), so a fenced script need not read it back. A tenure is the
-- server's clock in microseconds when it was made, and more than any made before in the group
-- (field '', which no worker's consumer name is, holds the last), so no value is ever given
-- twice: not to two consumers, not after the hash is deleted (a group made anew deletes it).

-- A new tenure for the consumer: call it when an entry leaves the consumer's hands, so the
-- deliveries made under its tenure so far are vouched for no more.
local function new_tenure(tenures, consumer)
  local now = redis.call('TIME')
  local value = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local last = tonumber(redis.call('HGET', tenures, ''))
  if last and value <= last then value = last + 1 end
  value = string.format('%d', value)
  redis.call('HSET', tenures, consumer, value, '', value)
  return tonumber(value)
end

-- The consumer's tenure; one is made when it has none.
local function tenure(tenures, consumer)
  local value = tonumber(redis.call('HGET', tenures, consumer))
  if value then return value end
  return new_tenure(tenures, consumer)
end
