-- zlib for hooks of any protocol: crc32(tvb, pos, len), Python's zlib.crc32;
-- inflate(tvb, pos, len, label), a zlib/gzip stream inflated by Wireshark's own zlib (nil if
-- not); and the expansion budget of one frame, as codecs/compression.py's Budget.

-- CRC-32 (zlib's). Lua 5.2 (tshark 4.0) has no bit operators: there bytes are XORed through a
-- 256 x 256 table, the CRC kept as four bytes, least significant first. Lua 5.3 and later
-- (tshark 4.4) have integer ones, which 5.2's parser refuses: that CRC is compiled from text
-- (CRC_NATIVE), used where it compiles, and takes a fifth of the time of the tables.
local XOR8 = {}
-- The table's four bytes, one list each (one local: the plugin's main chunk is near Lua's
-- limit of 200 locals); the first three times 256, as they index XOR8 as its high byte.
local CRC_T = { {}, {}, {}, {} }
-- Both tables are built at the first CRC, not when the plugin loads: a pass without a tree
-- checks none, and every protocol that carries this file would build them again (about
-- 25 ms of each tshark run apiece). A field of CRC_T, not a local: see above.
CRC_T.build = function()
  do
    -- made from a 16 x 16 table of nibbles: bit by bit the 65,536 entries took 50 ms
    local nibbles = {}
    for a = 0, 15 do
      for b = 0, 15 do
        local r, bit, x, y = 0, 1, a, b
        for _ = 1, 4 do
          if (x % 2) ~= (y % 2) then r = r + bit end
          x, y, bit = math.floor(x / 2), math.floor(y / 2), bit * 2
        end
        nibbles[a * 16 + b] = r
      end
    end
    for a = 0, 255 do
      local high, low = math.floor(a / 16), a % 16
      for b = 0, 255 do
        local b_low = b % 16
        XOR8[a * 256 + b] = nibbles[high * 16 + math.floor(b / 16)] * 16 + nibbles[low * 16 + b_low]
      end
    end
  end
  do
    for n = 0, 255 do
      local c = { n, 0, 0, 0 }   -- little-endian bytes of the table entry
      for _ = 1, 8 do
        local low = c[1] % 2
        -- shift right by one across the four bytes
        for i = 1, 4 do
          local carry = (i < 4) and (c[i + 1] % 2) or 0
          c[i] = math.floor(c[i] / 2) + carry * 128
        end
        if low == 1 then
          c[1] = XOR8[c[1] * 256 + 0x20]
          c[2] = XOR8[c[2] * 256 + 0x83]
          c[3] = XOR8[c[3] * 256 + 0xB8]
          c[4] = XOR8[c[4] * 256 + 0xED]
        end
      end
      CRC_T[1][n], CRC_T[2][n], CRC_T[3][n], CRC_T[4][n] = c[1] * 256, c[2] * 256, c[3] * 256, c[4]
    end
  end
  CRC_T.build = nil
end

CRC_T.NATIVE = [[
local byte, T = string.byte, {}
for n = 0, 255 do
  local c = n
  for _ = 1, 8 do c = (c & 1 == 1) and (0xEDB88320 ~ (c >> 1)) or (c >> 1) end
  T[n] = c
end
return function(s, len)
  local c, whole = 0xFFFFFFFF, len - len % 8
  for i = 1, whole, 8 do
    local b1, b2, b3, b4, b5, b6, b7, b8 = byte(s, i, i + 7)
    c = (c >> 8) ~ T[(c ~ b1) & 0xFF]
    c = (c >> 8) ~ T[(c ~ b2) & 0xFF]
    c = (c >> 8) ~ T[(c ~ b3) & 0xFF]
    c = (c >> 8) ~ T[(c ~ b4) & 0xFF]
    c = (c >> 8) ~ T[(c ~ b5) & 0xFF]
    c = (c >> 8) ~ T[(c ~ b6) & 0xFF]
    c = (c >> 8) ~ T[(c ~ b7) & 0xFF]
    c = (c >> 8) ~ T[(c ~ b8) & 0xFF]
  end
  for i = whole + 1, len do c = (c >> 8) ~ T[(c ~ byte(s, i)) & 0xFF] end
  return c ~ 0xFFFFFFFF
end
]]

local function crc32(tvb, pos, len)
  if len <= 0 then return 0 end
  if CRC_T.native == nil then
    -- nil and an error under Lua 5.2; a chunk that returns the function from 5.3 on
    local chunk = load(CRC_T.NATIVE, "=crc32", "t")
    CRC_T.native = chunk and chunk() or false
  end
  if CRC_T.native then return CRC_T.native(tvb:raw(pos, len), len) end
  if CRC_T.build then CRC_T.build() end
  local XOR = XOR8
  local T0, T1, T2, T3 = CRC_T[1], CRC_T[2], CRC_T[3], CRC_T[4]
  local c0, c1, c2, c3 = 255, 255, 255, 255
  -- One copy of the data, read eight bytes a call into locals: a table of a block's bytes
  -- cost an allocation as large as the block, and a call a byte costs more than its lookups.
  local s, byte = tvb:raw(pos, len), string.byte
  local whole = len - len % 8
  for i = 1, whole, 8 do
    local b1, b2, b3, b4, b5, b6, b7, b8 = byte(s, i, i + 7)
    local k = XOR[c0 * 256 + b1]
    c0, c1, c2, c3 = XOR[T0[k] + c1], XOR[T1[k] + c2], XOR[T2[k] + c3], T3[k]
    k = XOR[c0 * 256 + b2]
    c0, c1, c2, c3 = XOR[T0[k] + c1], XOR[T1[k] + c2], XOR[T2[k] + c3], T3[k]
    k = XOR[c0 * 256 + b3]
    c0, c1, c2, c3 = XOR[T0[k] + c1], XOR[T1[k] + c2], XOR[T2[k] + c3], T3[k]
    k = XOR[c0 * 256 + b4]
    c0, c1, c2, c3 = XOR[T0[k] + c1], XOR[T1[k] + c2], XOR[T2[k] + c3], T3[k]
    k = XOR[c0 * 256 + b5]
    c0, c1, c2, c3 = XOR[T0[k] + c1], XOR[T1[k] + c2], XOR[T2[k] + c3], T3[k]
    k = XOR[c0 * 256 + b6]
    c0, c1, c2, c3 = XOR[T0[k] + c1], XOR[T1[k] + c2], XOR[T2[k] + c3], T3[k]
    k = XOR[c0 * 256 + b7]
    c0, c1, c2, c3 = XOR[T0[k] + c1], XOR[T1[k] + c2], XOR[T2[k] + c3], T3[k]
    k = XOR[c0 * 256 + b8]
    c0, c1, c2, c3 = XOR[T0[k] + c1], XOR[T1[k] + c2], XOR[T2[k] + c3], T3[k]
  end
  for i = whole + 1, len do
    local k = XOR[c0 * 256 + byte(s, i)]
    c0, c1, c2, c3 = XOR[T0[k] + c1], XOR[T1[k] + c2], XOR[T2[k] + c3], T3[k]
  end
  return (255 - c0) + (255 - c1) * 256 + (255 - c2) * 65536 + (255 - c3) * 16777216
end

local function inflate(tvb, pos, len, label)
  if len <= 0 then return nil end
  local range = tvb(pos, len)
  for _, method in ipairs({ "uncompress_zlib", "uncompress" }) do
    local found, fn = pcall(function() return range[method] end)
    if found and fn then
      local ok, out = pcall(fn, range, label)
      if ok then return out end
      return nil
    end
  end
  return nil
end

-- What expanding one frame may still produce (SPEC.limits); told once when spent.
local function budget_of(ctx)
  if ctx.budget == nil then
    ctx.budget = { bytes = SPEC.limits.bytes, records = SPEC.limits.records, spent = false }
  end
  return ctx.budget
end

local function budget_refuse(ctx, where, what)
  local b = budget_of(ctx)
  if not b.spent then
    b.spent = true
    note(ctx, "error", "malformed", string.format(
      "%s: %s; expanding this frame stops at %d MiB decompressed and %d records %s",
      where, what, math.floor(SPEC.limits.bytes / 1048576), SPEC.limits.records, SPEC.limits.hint))
  end
end
