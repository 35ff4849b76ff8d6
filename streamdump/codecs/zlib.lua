-- zlib for hooks of any protocol: crc32(tvb, pos, len), Python's zlib.crc32;
-- inflate(tvb, pos, len, label), a zlib/gzip stream inflated by Wireshark's own zlib (nil if
-- not); and the expansion budget of one frame, as codecs/compression.py's Budget.

-- CRC-32 (zlib's), sliced by 16: T[k][b] is the CRC of byte b followed by k zero bytes, so 16
-- bytes are one XOR of 16 lookups. Lua 5.3 on (tshark 4.4) XORs with integer operators, which
-- 5.2's parser refuses: that CRC is compiled from text (NATIVE) where it compiles. Elsewhere
-- Wireshark's bit library XORs all 16 operands in one call (a byte at a time took four times as
-- long; bit32, or the tables as locals, no less). The tables are built at the first CRC: a pass
-- without a tree checks none. One local (the plugin's main chunk is near Lua's limit of 200).
local CRC_T = {}

-- The 16 tables, XORing with xor(a, b): T[0][b] is byte b's step, T[k][b] that of b followed by
-- k zero bytes. (math.floor halves: from 5.3 it keeps whole numbers integers.)
CRC_T.tables = function(xor)
  local floor, T = math.floor, { [0] = {} }
  for n = 0, 255 do
    local c = n
    for _ = 1, 8 do
      local low = c % 2
      c = floor(c / 2)
      if low == 1 then c = xor(c, 0xEDB88320) end
    end
    T[0][n] = c
  end
  for k = 1, 15 do
    local prev, row = T[k - 1], {}
    for n = 0, 255 do row[n] = xor(T[0][prev[n] % 256], floor(prev[n] / 256)) end
    T[k] = row
  end
  return T
end

-- Each road is its XOR, and the CRC made over the tables.
CRC_T.NATIVE = [[
local byte = string.byte
return function(a, b) return a ~ b end, function(T)
  local T0, T1, T2, T3, T4, T5, T6, T7 = T[0], T[1], T[2], T[3], T[4], T[5], T[6], T[7]
  local T8, T9, T10, T11, T12, T13, T14, T15 = T[8], T[9], T[10], T[11], T[12], T[13], T[14], T[15]
  return function(s, len)
    local c, whole = 0xFFFFFFFF, len - len % 16
    for i = 1, whole, 16 do
      local b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15, b16 = byte(s, i, i + 15)
      local x = c ~ (b1 | (b2 << 8) | (b3 << 16) | (b4 << 24))
      c = T15[x & 0xFF] ~ T14[(x >> 8) & 0xFF] ~ T13[(x >> 16) & 0xFF] ~ T12[x >> 24]
        ~ T11[b5] ~ T10[b6] ~ T9[b7] ~ T8[b8] ~ T7[b9] ~ T6[b10] ~ T5[b11] ~ T4[b12]
        ~ T3[b13] ~ T2[b14] ~ T1[b15] ~ T0[b16]
    end
    for i = whole + 1, len do c = (c >> 8) ~ T0[(c ~ byte(s, i)) & 0xFF] end
    return c ~ 0xFFFFFFFF
  end
end
]]

-- The same through Wireshark's bit library (numbers are doubles there: shifts are divisions of
-- whole numbers, and bit.bxor answers a signed 32-bit number, made unsigned again).
CRC_T.bitop = function()
  if bit == nil then error("no integer bit operators and no Wireshark bit library: no CRC-32") end
  local bxor, byte, WRAP = bit.bxor, string.byte, 4294967296
  return function(a, b) return bxor(a, b) % WRAP end, function(T)
    local T0, T1, T2, T3, T4, T5, T6, T7 = T[0], T[1], T[2], T[3], T[4], T[5], T[6], T[7]
    local T8, T9, T10, T11, T12, T13, T14, T15 = T[8], T[9], T[10], T[11], T[12], T[13], T[14], T[15]
    return function(s, len)
      local c, whole = 0xFFFFFFFF, len - len % 16
      for i = 1, whole, 16 do
        local b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15, b16 = byte(s, i, i + 15)
        local x = bxor(c, b1 + b2 * 256 + b3 * 65536 + b4 * 16777216) % WRAP
        local x0 = x % 256
        x = (x - x0) / 256
        local x1 = x % 256
        x = (x - x1) / 256
        local x2 = x % 256
        c = bxor(T15[x0], T14[x1], T13[x2], T12[(x - x2) / 256], T11[b5], T10[b6], T9[b7], T8[b8],
          T7[b9], T6[b10], T5[b11], T4[b12], T3[b13], T2[b14], T1[b15], T0[b16])
      end
      c = c % WRAP
      for i = whole + 1, len do
        local x = bxor(c, byte(s, i)) % WRAP
        local low = x % 256
        c = bxor(T0[low], (x - low) / 256) % WRAP
      end
      return bxor(c, 0xFFFFFFFF) % WRAP
    end
  end
end

-- raw: the bytes' copy, where the caller has made one (tvb:raw(pos, len)) for its own reading.
local function crc32(tvb, pos, len, raw)
  if len <= 0 then return 0 end
  local fn = CRC_T.fn
  if fn == nil then
    -- nil and an error under Lua 5.2; from 5.3 on, a chunk that returns its XOR and its maker
    local chunk = load(CRC_T.NATIVE, "=crc32", "t")
    CRC_T.road = chunk and "native" or "bitop"
    local xor, make = (chunk or CRC_T.bitop)()
    fn = make(CRC_T.tables(xor))
    CRC_T.fn = fn
  end
  return fn(raw or tvb:raw(pos, len), len)
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
