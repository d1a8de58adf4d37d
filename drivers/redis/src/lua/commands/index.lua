-- The status indexes: one sorted set per status whose members are the ids of the commands in
-- it, scored by when each entered it. Scripts that write states get them as KEYS[3..7], in
-- this order, after the state hash (KEYS[1]) and the stream (KEYS[2]).
local INDEX = {SUBMITTED = 3, RUNNING = 4, SUCCEEDED = 5, FAILED = 6, CANCELLED = 7}

-- Moves command `id` into the index of `status` at `score`, out of the index of `old` (a
-- status name; false when unknown: then out of every index).
local function move(id, old, status, score)
  if old and INDEX[old] then
    if old ~= status then
      redis.call('ZREM', KEYS[INDEX[old]], id)
    end
  else
    for k = 3, 7 do
      redis.call('ZREM', KEYS[k], id)
    end
  end
  redis.call('ZADD', KEYS[INDEX[status]], score, id)
end

-- Drops the oldest entries of each index whose state expired (a listing drops the rest as it
-- meets them). Terminal states expire in about the order they ended, so this keeps up. The
-- state keys are `prefix .. id`: the same hash tag, so the same slot on Redis Cluster.
local function sweep(prefix)
  for k = 3, 7 do
    for _, id in ipairs(redis.call('ZRANGE', KEYS[k], 0, 1)) do
      if redis.call('EXISTS', prefix .. id) == 0 then
        redis.call('ZREM', KEYS[k], id)
      end
    end
  end
end
