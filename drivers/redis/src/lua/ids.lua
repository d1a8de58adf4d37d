-- Shared by the ack and fetch scripts (prepended to them): entry ids `ms-seq` as numbers.

-- a < b for entry ids `ms-seq` (decimal, no leading zeros), compared as numbers.
local function before(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  if #ams ~= #bms then return #ams < #bms end
  if ams ~= bms then return ams < bms end
  if #aseq ~= #bseq then return #aseq < #bseq end
  return aseq < bseq
end

-- The id right after `id` (seq + 1, in decimal digits: exact beyond 2^53).
local function after(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  local digits = {string.byte(seq, 1, -1)}
  local i = #digits
  while i > 0 and digits[i] == 57 do
    digits[i] = 48
    i = i - 1
  end
  if i == 0 then table.insert(digits, 1, 49) else digits[i] = digits[i] + 1 end
  return ms .. '-' .. string.char(unpack(digits))
end
