-- Lua twin of streamdump/codecs/amqp.py, for the generated plugin: finds the sections of an
-- AMQP 1.0 bare message and, when a tree is built, shows their values under the names the
-- registry declares for the message.

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

-- The walk over one copy of a record's bytes (s; at counts from 1, base is the record's
-- position): a TvbRange for every byte read cost more than the rest of the walk.
local AMQP_WALK = {}

function AMQP_WALK.skip(s, at, n, depth, base)
  if depth > 64 then amqp_fail(base + at - 1, "values nest too deep") end
  if at > n then amqp_fail(base + at - 1, "the message ends inside a value") end
  local c = s:byte(at)
  if c == 0x00 then
    local after = AMQP_WALK.skip(s, at + 1, n, depth + 1, base)
    return AMQP_WALK.skip(s, after, n, depth + 1, base)
  end
  local fixed = AMQP_FIXED[c]
  if fixed then
    if n - at < fixed then amqp_fail(base + at - 1, string.format("the value of constructor 0x%02x is cut", c)) end
    return at + 1 + fixed
  end
  local width = AMQP_SIZED[c]
  if width == nil then amqp_fail(base + at - 1, string.format("unknown constructor 0x%02x", c)) end
  if n - at < width then amqp_fail(base + at - 1, string.format("the size of constructor 0x%02x is cut", c)) end
  local size = s:byte(at + 1)
  if width == 4 then
    local b, c2, d = s:byte(at + 2, at + 4)
    size = ((size * 256 + b) * 256 + c2) * 256 + d
  end
  if n - at - width < size then amqp_fail(base + at - 1, string.format("the value of constructor 0x%02x is cut", c)) end
  return at + 1 + width + size
end

function AMQP_WALK.section_code(s, at, n, base)
  if at > n then amqp_fail(base + at - 1, "the message ends inside a section descriptor") end
  local c = s:byte(at)
  local after = AMQP_WALK.skip(s, at, n, 1, base)
  if c == 0x53 then return s:byte(at + 1), after end
  if c == 0x80 then
    local b1, b2, b3, b4, b5, b6, b7, b8 = s:byte(at + 1, at + 8)
    if b1 + b2 + b3 + b4 + b5 + b6 + b7 == 0 and b8 <= 0x78 then return b8, after end
    return nil, after
  end
  if c == 0xa3 or c == 0xb3 then
    local width = c == 0xa3 and 1 or 4
    local symbol = s:sub(at + 1 + width, after - 1)
    for prefix, code in pairs(AMQP_SECTION_SYMBOLS) do
      if symbol:sub(1, #prefix) == prefix then return code, after end
    end
    return nil, after
  end
  return nil, after
end

-- Whether the record starts with a described message section, as amqp.looks_like_amqp says;
-- and the record's bytes, for amqp_sections to walk without a second copy.
local function amqp_looks_like(tvb, pos, len)
  if len < 3 then return false end
  local s = tvb:raw(pos, len)
  local zero, c = s:byte(1, 2)
  if zero ~= 0 then return false end
  if c == 0x53 then
    local code = s:byte(3)
    return code >= 0x70 and code <= 0x78, s
  end
  if c == 0x80 then
    if len < 10 then return false end
    local b1, b2, b3, b4, b5, b6, b7, b8 = s:byte(3, 10)
    return b1 + b2 + b3 + b4 + b5 + b6 + b7 == 0 and b8 >= 0x70 and b8 <= 0x78, s
  end
  if c == 0xa3 or c == 0xb3 then
    local ok, code = pcall(AMQP_WALK.section_code, s, 2, len, pos)
    return ok and code ~= nil, s
  end
  return false
end

-- Appends the sections of s (a message's bytes at pos) to sections; raises at the first
-- malformed byte. A section's value_at is where its value starts (after the descriptor),
-- value_code that value's constructor byte.
function AMQP_WALK.sections(s, len, pos, sections)
  local at = 1
  while at <= len do
    local first = s:byte(at)
    if first ~= 0x00 then
      amqp_fail(pos + at - 1, string.format("byte 0x%02x is not the start of a message section (0x00)", first))
    end
    local code, after = AMQP_WALK.section_code(s, at + 1, len, pos)
    if code == nil or code < 0x70 or code > 0x78 then amqp_fail(pos + at - 1, "unknown section descriptor") end
    local finish = AMQP_WALK.skip(s, after, len, 1, pos)
    sections[#sections + 1] = {
      code = code, pos = pos + at - 1, len = finish - at, value_at = pos + after - 1, value_code = s:byte(after),
    }
    at = finish
  end
end

-- Whether the len bytes of s at at are one data section to their end (00 53 75, then binary:
-- a0 and a 1-byte size, or b0 and a 4-byte one), the message most clients publish: its binary's
-- constructor (0xa0 or 0xb0), else nil. The walk finds the same section.
function AMQP_WALK.lone_data(s, at, len)
  local zero, small, code, binary, size = s:byte(at, at + 4)
  if zero ~= 0 or small ~= 0x53 or code ~= 0x75 then return nil end
  if binary == 0xa0 and len == 5 + size then return binary end
  if binary == 0xb0 and len >= 8 then
    local b, c, d = s:byte(at + 5, at + 7)
    if len == 8 + ((size * 256 + b) * 256 + c) * 256 + d then return binary end
  end
  return nil
end

-- The one-data-section answer, filled in again for each such message: the caller reads it
-- before it asks for the next message's (two tables a message, by the hundred thousand).
local AMQP_LONE = { { code = 0x75 } }

-- The sections of the message s (its bytes, at pos in the frame, len long): a list of {code,
-- pos, len, value_at, value_code}, and the error text of the first malformed byte, if any.
local function amqp_sections(s, pos, len)
  local binary = AMQP_WALK.lone_data(s, 1, len)  -- one read of its first bytes
  if binary then
    local lone = AMQP_LONE[1]
    lone.pos, lone.len, lone.value_at, lone.value_code = pos, len, pos + 3, binary
    return AMQP_LONE, nil
  end
  local sections = {}
  local ok, err = pcall(AMQP_WALK.sections, s, len, pos, sections)
  if ok then return sections, nil end
  if type(err) == "table" and err.amqp then return sections, err.text end
  error(err, 0)
end

-- Values, for the detail tree only: what a section holds, under the field names the registry
-- declares for the message (the spec's amqp `of:`). A value is {t = kind, v = value, pos = start
-- of its body, len = body length}; kinds: null, bool, int, float, text, bytes, list, map,
-- described. A bytes value keeps its tvb instead of v: its hex text is made only where it is
-- shown as text (AMQPV.text). One table (the plugin is one chunk, of 200 locals at most).
local AMQPV = {}

AMQPV.INTS = {
  [0x50] = { 1, false }, [0x60] = { 2, false }, [0x70] = { 4, false }, [0x52] = { 1, false },
  [0x53] = { 1, false }, [0x51] = { 1, true }, [0x61] = { 2, true }, [0x71] = { 4, true },
  [0x54] = { 1, true }, [0x55] = { 1, true },
}
AMQPV.ZERO = { [0x43] = true, [0x44] = true }
AMQPV.HEX = { [0x74] = 4, [0x84] = 8, [0x94] = 16 }

function AMQPV.hex(tvb, pos, len)
  if len == 0 then return "" end
  return tvb(pos, len):bytes():tohex():lower()
end

function AMQPV.utf8(code)
  if code < 0x80 then return string.char(code) end
  if code < 0x800 then return string.char(0xc0 + math.floor(code / 0x40), 0x80 + code % 0x40) end
  if code < 0x10000 then
    return string.char(0xe0 + math.floor(code / 0x1000), 0x80 + math.floor(code / 0x40) % 0x40, 0x80 + code % 0x40)
  end
  return string.char(0xf0 + math.floor(code / 0x40000), 0x80 + math.floor(code / 0x1000) % 0x40,
    0x80 + math.floor(code / 0x40) % 0x40, 0x80 + code % 0x40)
end

-- The body of constructor c at pos (after the constructor byte): the value and the position after it.
function AMQPV.body(tvb, c, pos, stop, depth)
  local fixed = AMQP_FIXED[c]
  if fixed ~= nil and stop - pos < fixed then amqp_fail(pos, "a value is cut") end
  if c == 0x40 then return { t = "null" }, pos end
  if c == 0x41 or c == 0x42 then return { t = "bool", v = c == 0x41 }, pos end
  if c == 0x56 then return { t = "bool", v = uint_of(tvb(pos, 1)) == 1 }, pos + 1 end
  if AMQPV.ZERO[c] then return { t = "int", v = 0 }, pos end
  local int_of = AMQPV.INTS[c]
  if int_of then
    local range = tvb(pos, int_of[1])
    return { t = "int", v = int(int_of[2] and range:int() or range:uint()), pos = pos, len = int_of[1] }, pos + int_of[1]
  end
  if c == 0x80 then return { t = "int", v = tvb(pos, 8):uint64(), pos = pos, len = 8 }, pos + 8 end
  if c == 0x81 or c == 0x83 then return { t = "int", v = tvb(pos, 8):int64(), pos = pos, len = 8 }, pos + 8 end
  if c == 0x72 then return { t = "float", v = tvb(pos, 4):float(), pos = pos, len = 4 }, pos + 4 end
  if c == 0x82 then return { t = "float", v = tvb(pos, 8):float(), pos = pos, len = 8 }, pos + 8 end
  if AMQPV.HEX[c] then
    return { t = "text", v = AMQPV.hex(tvb, pos, AMQPV.HEX[c]), pos = pos, len = AMQPV.HEX[c] }, pos + AMQPV.HEX[c]
  end
  if c == 0x73 then return { t = "text", v = AMQPV.utf8(int(tvb(pos, 4):uint())), pos = pos, len = 4 }, pos + 4 end
  if c == 0x98 then
    local h = AMQPV.hex(tvb, pos, 16)
    local text = h:sub(1, 8) .. "-" .. h:sub(9, 12) .. "-" .. h:sub(13, 16) .. "-" .. h:sub(17, 20) .. "-" .. h:sub(21)
    return { t = "text", v = text, pos = pos, len = 16 }, pos + 16
  end
  if c == 0x45 then return { t = "list", v = {} }, pos end
  local width = AMQP_SIZED[c]
  if width == nil then amqp_fail(pos, string.format("unknown constructor 0x%02x", c)) end
  if stop - pos < width then amqp_fail(pos, "a size is cut") end
  local size = uint_of(tvb(pos, width))
  local start, finish = pos + width, pos + width + size
  if finish > stop then amqp_fail(pos, "a value is cut") end
  if c == 0xa0 or c == 0xb0 then return { t = "bytes", tvb = tvb, pos = start, len = size }, finish end
  if c == 0xa1 or c == 0xb1 or c == 0xa3 or c == 0xb3 then
    return { t = "text", v = tvb:raw(start, size), pos = start, len = size }, finish
  end
  if size < width then amqp_fail(pos, "a compound's count is cut") end
  local count = uint_of(tvb(start, width))
  local items, at = {}, start + width
  if c == 0xe0 or c == 0xf0 then
    -- One constructor for every element, possibly described.
    local element, descriptor = uint_of(tvb(at, 1)), nil
    at = at + 1
    if element == 0x00 then
      descriptor, at = AMQPV.value(tvb, at, finish, depth + 1)
      element = uint_of(tvb(at, 1))
      at = at + 1
    end
    for i = 1, count do
      items[i], at = AMQPV.body(tvb, element, at, finish, depth + 1)
      if descriptor then items[i] = { t = "described", d = descriptor, v = items[i] } end
    end
    return { t = "list", v = items, pos = start, len = size }, finish
  end
  for i = 1, count do items[i], at = AMQPV.value(tvb, at, finish, depth + 1) end
  if at ~= finish then amqp_fail(pos, "a compound's elements do not fill it") end
  if c == 0xc1 or c == 0xd1 then
    local pairs_ = {}
    for i = 1, count - 1, 2 do pairs_[#pairs_ + 1] = { items[i], items[i + 1] } end
    return { t = "map", v = pairs_, pos = start, len = size }, finish
  end
  return { t = "list", v = items, pos = start, len = size }, finish
end

AMQPV.value = function(tvb, pos, stop, depth)
  if depth > 64 then amqp_fail(pos, "values nest too deep") end
  if pos >= stop then amqp_fail(pos, "the message ends inside a value") end
  local c = uint_of(tvb(pos, 1))
  if c == 0x00 then
    local descriptor, after = AMQPV.value(tvb, pos + 1, stop, depth + 1)
    local value, finish = AMQPV.value(tvb, after, stop, depth + 1)
    return { t = "described", d = descriptor, v = value, pos = pos, len = finish - pos }, finish
  end
  local value, finish = AMQPV.body(tvb, c, pos + 1, stop, depth)
  if value.pos == nil then value.pos, value.len = pos, finish - pos end
  return value, finish
end

-- The shortest text that reads back as the same double, as Python prints floats.
function AMQPV.float(x)
  if x ~= x then return "NaN" end
  if x == math.huge then return "Infinity" end
  if x == -math.huge then return "-Infinity" end
  for digits = 1, 17 do
    local text = string.format("%." .. digits .. "g", x)
    if tonumber(text) == x then return text end
  end
  return string.format("%.17g", x)
end

-- A value as text, as the JSON output writes it; compounds are named by kind and size.
function AMQPV.text(value)
  local t = value.t
  if t == "null" then return "null" end
  if t == "bool" then return value.v and "true" or "false" end
  if t == "int" then return tostring(value.v) end
  if t == "float" then return AMQPV.float(value.v) end
  if t == "text" then return value.v end
  if t == "bytes" then return AMQPV.hex(value.tvb, value.pos, value.len) end
  if t == "described" then return "described " .. AMQPV.text(value.d) .. ": " .. AMQPV.text(value.v) end
  return t .. " of " .. #value.v
end

-- One item of a declared field holding value.
function AMQPV.item(tree, tvb, spec, value)
  local range = tvb(value.pos, value.len)
  local field = F[spec.name]
  local t = spec.type
  if value.t == "bytes" and (t == "bytes") then return tree:add(field, range) end
  if value.t == "int" and spec.width then
    if spec.type == "int64" then return tree:add(field, range, Int64.new(tostring(value.v))) end
    if spec.type == "uint64" then return tree:add(field, range, UInt64.new(tostring(value.v))) end
    return tree:add(field, range, tonumber(tostring(value.v)))
  end
  if value.t == "bool" and t == "bool" then return tree:add(field, range, value.v) end
  if value.t == "text" and t == "string" then return tree:add(field, range, value.v) end
  if t == "amqp" then return tree:add(field, range, AMQPV.text(value)) end
  -- The wire's type is not the spec's: the value as text, under no field.
  return tree:add(range, (NAME_TITLE[spec.name] or spec.name) .. ": " .. AMQPV.text(value))
end

function AMQPV.map(tree, tvb, spec, value)
  local holder = tree:add(F[spec.name], tvb(value.pos, value.len))
  holder:set_text(struct_title(spec.name) .. ": " .. #value.v .. " entries")
  for _, pair in ipairs(value.v) do
    local k, v = pair[1], pair[2]
    local entry = holder:add(tvb(k.pos, v.pos + v.len - k.pos), AMQPV.text(k) .. ": " .. AMQPV.text(v))
    entry:add(F[spec.name .. ".key"], tvb(k.pos, k.len), AMQPV.text(k))
    if v.t ~= "null" then entry:add(F[spec.name .. ".value"], tvb(v.pos, v.len), AMQPV.text(v)) end
  end
  return holder
end

-- The registry's members of a message struct by section name, made once per struct.
AMQPV.BY_SECTION = {}
function AMQPV.by_section(struct)
  local known = AMQPV.BY_SECTION[struct]
  if known == nil then
    known = {}
    for _, member in ipairs(SPEC.structs[struct]) do known[member.entry or member.name] = member end
    AMQPV.BY_SECTION[struct] = known
  end
  return known
end

-- An array's element as a spec of its own, made once per array spec.
AMQPV.ELEMENTS = {}

-- The values of one section s (found by amqp_sections) under item, as spec declares them;
-- raises where they cannot be read.
function AMQPV.section(item, tvb, s, spec)
  local stop = s.pos + s.len
  local code = s.value_code
  if (code == 0xa0 or code == 0xb0) and spec.type == "bytes" then
    -- Binary in a bytes field (a data section), as AMQPV.item shows it: the bytes after the
    -- size, to the section's end (amqp_sections found the value ending there).
    local start = s.value_at + (code == 0xa0 and 2 or 5)
    return TI.add(item, F[spec.name], tvb(start, stop - start))
  end
  local value = AMQPV.value(tvb, s.value_at, stop, 1)
  if value.t == "null" then return end
  if spec.type == "map" and value.t == "map" then
    AMQPV.map(item, tvb, spec, value)
  elseif spec.struct and value.t == "list" then
    local holder = item:add(F[spec.name], tvb(s.pos, s.len))
    holder:set_text(struct_title(spec.name))
    for i, member in ipairs(SPEC.structs[spec.struct]) do
      local element = value.v[i]
      if element ~= nil and element.t ~= "null" then AMQPV.item(holder, tvb, member, element) end
    end
  elseif spec.type == "array" and value.t == "list" then
    local element_spec = AMQPV.ELEMENTS[spec]
    if element_spec == nil then
      element_spec = { name = spec.name, type = spec.of.type }
      AMQPV.ELEMENTS[spec] = element_spec
    end
    for _, element in ipairs(value.v) do
      if element.t ~= "null" then AMQPV.item(item, tvb, element_spec, element) end
    end
  else
    AMQPV.item(item, tvb, spec, value)
  end
end

-- The values of a message's sections (as amqp_sections found them) under item, by the
-- registry's declaration of the message (struct: its name in SPEC.structs).
function AMQPV.show(item, tvb, sections, struct)
  local by_section, names = AMQPV.by_section(struct), SPEC.enums.amqp_section
  for i = 1, #sections do
    local s = sections[i]
    if not pcall(AMQPV.section, item, tvb, s, by_section[names[s.code]]) then
      item:add(tvb(s.pos, s.len), names[s.code] .. ": values not shown")
    end
  end
end
