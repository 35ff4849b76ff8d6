-- Lua twin of dissectors/liftbridge/envelope.py: the envelope's CRC-32C (when the flags say
-- one follows) checked over the bytes from the header length on, and the header length
-- honoured: bytes of a longer header are passed over, a shorter one is an error.

-- CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), table-driven, in arithmetic only.
local LB_CRC_TABLE = nil

local function lb_xor(a, b)
  local r, bit = 0, 1
  while a > 0 or b > 0 do
    local x, y = a % 2, b % 2
    if x ~= y then r = r + bit end
    a, b, bit = (a - x) / 2, (b - y) / 2, bit * 2
  end
  return r
end

local function lb_crc32c(raw)
  if LB_CRC_TABLE == nil then
    LB_CRC_TABLE = {}
    for i = 0, 255 do
      local c = i
      for _ = 1, 8 do
        if c % 2 == 1 then c = lb_xor((c - 1) / 2, 0x82F63B78) else c = c / 2 end
      end
      LB_CRC_TABLE[i] = c
    end
  end
  local crc = 0xFFFFFFFF
  for i = 1, #raw do
    local index = lb_xor(crc % 256, raw:byte(i))
    crc = lb_xor(math.floor(crc / 256), LB_CRC_TABLE[index])
  end
  return lb_xor(crc, 0xFFFFFFFF)
end

HOOKS.envelope = {
  min_size = 0,
  read = function(spec, tvb, pos, stop, tree, ctx, name, siblings)
    local avail = int(tvb:len())
    local length = avail > 5 and tvb(5, 1):uint() or pos
    local flagged = avail > 6 and tvb(6, 1):uint() % 2 == 1
    local header = pos + (flagged and 4 or 0)
    if length < header then
      note(ctx, "error", "malformed", string.format("header length %d is shorter than the header (%d bytes)", length, header))
    end
    if length > stop then short(name, pos, length - pos, stop - pos) end
    local value = {}
    local holder = tree and tree:add(tvb(pos, 0), "Envelope Rest") or nil
    if flagged then
      if stop - pos < 4 then short("crc", pos, 4, stop - pos) end
      local expected = tvb(pos, 4):uint()
      if holder then holder:add(F.crc, tvb(pos, 4)) end
      pos = pos + 4
      if length < pos then length = pos end
      local actual = lb_crc32c(stop > length and tvb:raw(length, stop - length) or "")
      value.crc = expected
      value.crc_check = expected == actual and "valid" or "wrong"
      if holder then holder:add(F.crc_check, tvb(pos - 4, 4), value.crc_check):set_generated() end
      if expected ~= actual then
        note(ctx, "error", "malformed", string.format(
          "CRC-32C mismatch: the envelope says 0x%08x, the message gives 0x%08x", expected, actual))
      end
    end
    if length > pos then
      value.header_padding = { pos = pos, len = length - pos, tvb = tvb }
      if holder then holder:add(F.header_padding, tvb(pos, length - pos)) end
    end
    if length < pos then length = pos end
    return value, length
  end,
}
