-- Promotion alone, pipelined before the fast path's XREADGROUP so that read takes the promoted
-- messages natively (a read inside a script costs Lua tables twice).
-- KEYS: stream, delayed set. ARGV: payload field, max_len ('' = untrimmed), most to promote.
-- Returns ms until the next delayed message is due (0 if one is, -1 if none).
return promote(KEYS[1], KEYS[2], ARGV[1], ARGV[2], tonumber(ARGV[3]))
