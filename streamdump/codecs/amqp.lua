-- Lua twin of streamdump/codecs/amqp.py, for the generated plugin: finds the sections of an
-- AMQP 1.0 bare message and names them; values are left to the Python side.

local AMQP_FIXED = {
  [0x40] = 0, [0x41] = 0, [0x42] = 0, [0x43] = 0, [0x44] = 0, [0x45] = 0,
  [0x50] = 1, [0x51] = 1, [0x52] = 1, [0x53] = 1, [0x54] = 1, [0x55] = 1, [0x56] = 1,
  [0x60] = 2, [0x61] = 2,
  [0x70] = 4, [0x71] = 4, [0x72] = 4, [0x73] = 4, [0x74] = 4,
  [0x80] = 8, [0x81] = 8, [0x82] = 8, [0x83] = 8, [0x84] = 8,
  [0x94] = 16, [0x98] = 16,
}
-- Variable-width constructors: how many bytes give the length that follows.
local AMQP_SIZED = {
  [0xa0] = 1, [0xa1] = 1, [0xa3] = 1, [0xc0] = 1, [0xc1] = 1, [0xe0] = 1,
  [0xb0] = 4, [0xb1] = 4, [0xb3] = 4, [0xd0] = 4, [0xd1] = 4, [0xf0] = 4,
}
local AMQP_SECTION_SYMBOLS = {}
for code, name in pairs(SPEC.enums.amqp_section) do
  AMQP_SECTION_SYMBOLS["amqp:" .. name:gsub("_", "-") .. ":"] = code
end

local function amqp_fail(pos, text) error({ amqp = true, offset = pos, text = text }, 0) end

-- The position after the AMQP value at pos (descriptors included).
local function amqp_skip(tvb, pos, stop, depth)
  if depth > 64 then amqp_fail(pos, "values nest too deep") end
  if pos >= stop then amqp_fail(pos, "the message ends inside a value") end
  local c = uint_of(tvb(pos, 1))
  if c == 0x00 then
    local after = amqp_skip(tvb, pos + 1, stop, depth + 1)
    return amqp_skip(tvb, after, stop, depth + 1)
  end
  local fixed = AMQP_FIXED[c]
  if fixed then
    if stop - pos - 1 < fixed then amqp_fail(pos, string.format("the value of constructor 0x%02x is cut", c)) end
    return pos + 1 + fixed
  end
  local width = AMQP_SIZED[c]
  if width == nil then amqp_fail(pos, string.format("unknown constructor 0x%02x", c)) end
  if stop - pos - 1 < width then amqp_fail(pos, string.format("the size of constructor 0x%02x is cut", c)) end
  local size = uint_of(tvb(pos + 1, width))
  if stop - pos - 1 - width < size then amqp_fail(pos, string.format("the value of constructor 0x%02x is cut", c)) end
  return pos + 1 + width + size
end

local function amqp_section_code(tvb, pos, stop)
  if pos >= stop then amqp_fail(pos, "the message ends inside a section descriptor") end
  local c = uint_of(tvb(pos, 1))
  local after = amqp_skip(tvb, pos, stop, 1)
  if c == 0x53 then return uint_of(tvb(pos + 1, 1)), after end
  if c == 0x80 then
    local value = tvb(pos + 1, 8):uint64()
    if value <= UInt64(0x78) then return tonumber(tostring(value)), after end
    return nil, after
  end
  if c == 0xa3 or c == 0xb3 then
    local width = c == 0xa3 and 1 or 4
    local symbol = tvb:raw(pos + 1 + width, after - pos - 1 - width)
    for prefix, code in pairs(AMQP_SECTION_SYMBOLS) do
      if symbol:sub(1, #prefix) == prefix then return code, after end
    end
    return nil, after
  end
  return nil, after
end

-- Whether the record starts with a described message section, as amqp.looks_like_amqp says.
local function amqp_looks_like(tvb, pos, len)
  if len < 3 or uint_of(tvb(pos, 1)) ~= 0 then return false end
  local c = uint_of(tvb(pos + 1, 1))
  if c == 0x53 then
    local code = uint_of(tvb(pos + 2, 1))
    return code >= 0x70 and code <= 0x78
  end
  if c == 0x80 then
    if len < 10 then return false end
    local value = tvb(pos + 2, 8):uint64()
    return value >= UInt64(0x70) and value <= UInt64(0x78)
  end
  if c == 0xa3 or c == 0xb3 then
    local ok, code = pcall(amqp_section_code, tvb, pos + 1, pos + len)
    return ok and code ~= nil
  end
  return false
end

-- The sections of the message in [pos, pos + len): a list of {code, pos, len}, and the
-- error text of the first malformed byte, if any.
local function amqp_sections(tvb, pos, len)
  local sections, stop = {}, pos + len
  local ok, err = pcall(function()
    while pos < stop do
      if uint_of(tvb(pos, 1)) ~= 0x00 then
        amqp_fail(pos, string.format("byte 0x%02x is not the start of a message section (0x00)", uint_of(tvb(pos, 1))))
      end
      local code, after = amqp_section_code(tvb, pos + 1, stop)
      if code == nil or code < 0x70 or code > 0x78 then amqp_fail(pos, "unknown section descriptor") end
      local finish = amqp_skip(tvb, after, stop, 1)
      sections[#sections + 1] = { code = code, pos = pos, len = finish - pos }
      pos = finish
    end
  end)
  if ok then return sections, nil end
  if type(err) == "table" and err.amqp then return sections, err.text end
  error(err, 0)
end
