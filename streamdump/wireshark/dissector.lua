-- The interpreter of SPEC: layouts, expert info and the conversation tracker, made for a
-- protocol on the first packet it is handed (wiring.lua), over what proto.lua registered. The Lua
-- counterpart of streamdump/spec/layout.py, keyed.py, decoder.py and analysis/tracker.py. Lua 5.2 to 5.4:
-- no integer division operator, no bit operators, no bit32; arithmetic only (codecs/zlib.lua's
-- CRC-32 alone takes the bit operators or Wireshark's bit library, by the Lua it runs in).

-- TreeItem's methods, for code that adds items by the thousand (a chunk's records) to call as
-- functions: `item:add(...)` finds `add` through the userdata's __index, a C call of its own.
local TI = {
  add = TreeItem.add, set_generated = TreeItem.set_generated, set_text = TreeItem.set_text,
  set_len = TreeItem.set_len,
}
local HOOKS = {}        -- hook name -> Lua twin (filled in by the hook files below)
local FRAMING = {}      -- pdu_length(tvb, offset), from the package of a protocol no length field frames
local CONV_RULES = {}   -- the protocol package's conversation rules' twins, by the rule's key
-- The package's messages.lua: MESSAGES.volume(frame, f, from_client, size), what a frame moves
-- as `streamdump stats` counts it per stream, topic or subject (its MessageRules.volume):
-- { subject, direction, messages, bytes }, or nil.
local MESSAGES = {}
-- The PDU being dissected: its packet and top-level tree, for protocols its fields carry.
local PDU_CONTEXT = {}

-- Small helpers ----------------------------------------------------------------------

-- Big-endian readers (the hooks' own formats are big-endian whatever the protocol's order).
local function uint_of(range) return int(range:uint()) end

-- The protocol's byte order, for the fields of its spec.
local LITTLE = SPEC.order == "<"
local READ = {
  uint8 = "uint", uint16 = "uint", uint32 = "uint", uint64 = "uint64",
  int8 = "int", int16 = "int", int32 = "int", int64 = "int64",
}
-- The byte order is the protocol's: its TvbRange methods are chosen once.
if LITTLE then for t, method in pairs(READ) do READ[t] = "le_" .. method end end
local PREFIX_READ = { [true] = LITTLE and "le_int" or "int", [false] = LITTLE and "le_uint" or "uint" }
-- The same methods as functions (READ_FN), called without a lookup through the range's __index.
local READ_FN = {}
for t, method in pairs(READ) do READ_FN[t] = TvbRange[method] end
local function read_int(range, t)
  local value = READ_FN[t](range)
  if t ~= "uint64" and t ~= "int64" then value = int(value) end
  return value
end
local function prefix_of(range, spec)
  -- In a local first: Lua 5.4 (Wireshark 4.4) miscompiles an upvalue indexed by a bare
  -- comparison (`T[a == b]`), and indexes the wrong value.
  local signed = spec.prefix_signed == true
  return int(range[PREFIX_READ[signed]](range))
end

local ACRONYMS = { id = "ID", ids = "IDs", crc = "CRC", sasl = "SASL" }
local TITLES = {}  -- struct name -> title, made once
local function struct_title(name)
  local known = TITLES[name]
  if known then return known end
  local words = {}
  for word in name:gmatch("[^_]+") do
    words[#words + 1] = ACRONYMS[word] or (word:sub(1, 1):upper() .. word:sub(2))
  end
  TITLES[name] = table.concat(words, " ")
  return TITLES[name]
end

local function hex(value, width)
  return string.format("0x%0" .. width .. "x", value)
end

local function quoted(text)
  -- Python's repr() of a string, which the Python side's messages use.
  if text:find("'", 1, true) and not text:find('"', 1, true) then return '"' .. text .. '"' end
  return "'" .. text:gsub("\\", "\\\\"):gsub("'", "\\'") .. "'"
end

-- Python's repr() of bytes (b'...'), or of a string (ASCII control bytes escaped, the rest kept).
local function py_repr(text, as_bytes)
  local q = "'"
  if text:find("'", 1, true) and not text:find('"', 1, true) then q = '"' end
  local named = { [9] = "\\t", [10] = "\\n", [13] = "\\r", [92] = "\\\\" }
  local out = {}
  for i = 1, #text do
    local b = text:byte(i)
    if named[b] then out[#out + 1] = named[b]
    elseif string.char(b) == q then out[#out + 1] = "\\" .. q
    elseif b < 32 or b == 127 or (as_bytes and b > 127) then out[#out + 1] = string.format("\\x%02x", b)
    else out[#out + 1] = string.char(b) end
  end
  return (as_bytes and "b" or "") .. q .. table.concat(out) .. q
end

local function contains(list, value)
  for _, v in ipairs(list) do if v == value then return true end end
  return false
end

local function round6(x)
  return tonumber(string.format("%.6f", x))
end

-- Bits without bit operators: value AND mask, shifted down to the mask's lowest bit.
-- (A mask whose bits are one run, the commonest, takes a division and a modulo; the others
-- their bits one by one. Runs found once per mask: the spec's masks are few.)
local masked = (function()
  local runs = {}  -- mask -> { its lowest bit, how many values its run holds }, or false
  return function(value, mask)
    local run = runs[mask]
    if run == nil then
      local low = 1
      while mask > 0 and math.floor(mask / low) % 2 == 0 do low = low * 2 end
      local span, power = math.floor(mask / low) + 1, 1
      while power < span do power = power * 2 end
      run = mask > 0 and power == span and { low, span } or false
      runs[mask] = run
    end
    if run and type(value) == "number" and value >= 0 and value < 9007199254740992 then
      return int(math.floor(value / run[1]) % run[2])
    end
    local out, shift = 0, nil
    local v, m = value, mask
    local bit = 1
    while m > 0 do
      if m % 2 == 1 then
        if shift == nil then shift = bit end
        if v % 2 == 1 then out = out + bit end
      end
      v, m, bit = math.floor(v / 2), math.floor(m / 2), bit * 2
    end
    if shift == nil then return 0 end
    return int(math.floor(out / shift))
  end
end)()

-- value AND mask, the bits left in place.
local function band(value, mask)
  local low = 1
  while mask > 0 and (mask / low) % 2 < 1 do low = low * 2 end
  return masked(value, mask) * low
end

local function has_bit(value, bit)
  return math.floor(value / bit) % 2 == 1
end

-- Strict UTF-8, as Python's decoder checks it.
local function utf8_valid(s)
  local i, n = 1, #s
  while i <= n do
    local c = s:byte(i)
    local extra
    if c < 0x80 then extra = 0
    elseif c >= 0xC2 and c <= 0xDF then extra = 1
    elseif c >= 0xE0 and c <= 0xEF then extra = 2
    elseif c >= 0xF0 and c <= 0xF4 then extra = 3
    else return false end
    if i + extra > n then return false end
    for k = 1, extra do
      local cc = s:byte(i + k)
      if cc < 0x80 or cc > 0xBF then return false end
    end
    if extra >= 2 then
      local c2 = s:byte(i + 1)
      if c == 0xE0 and c2 < 0xA0 then return false end
      if c == 0xED and c2 > 0x9F then return false end
      if c == 0xF0 and c2 < 0x90 then return false end
      if c == 0xF4 and c2 > 0x8F then return false end
    end
    i = i + extra + 1
  end
  return true
end

-- Text from bytes that are not all UTF-8, as Python's decode(errors="replace") makes it: each
-- invalid byte, or the start of a sequence cut short (its maximal valid part), becomes U+FFFD.
-- (Wireshark's own string(ENC_UTF_8) replaces differently, and may cut its result short.)
local REPLACEMENT = "\239\191\189"

local function py_utf8(s)
  local out, i, n = {}, 1, #s
  while i <= n do
    local c = s:byte(i)
    local extra, low, high = nil, 0x80, 0xBF
    if c < 0x80 then extra = 0
    elseif c >= 0xC2 and c <= 0xDF then extra = 1
    elseif c >= 0xE0 and c <= 0xEF then
      extra = 2
      if c == 0xE0 then low = 0xA0 elseif c == 0xED then high = 0x9F end
    elseif c >= 0xF0 and c <= 0xF4 then
      extra = 3
      if c == 0xF0 then low = 0x90 elseif c == 0xF4 then high = 0x8F end
    end
    if extra == nil then
      out[#out + 1] = REPLACEMENT
      i = i + 1
    else
      local k = 1
      while k <= extra and i + k <= n do
        local cc = s:byte(i + k)
        local lo, hi = 0x80, 0xBF
        if k == 1 then lo, hi = low, high end
        if cc < lo or cc > hi then break end
        k = k + 1
      end
      if k > extra then
        out[#out + 1] = s:sub(i, i + extra)
      else
        out[#out + 1] = REPLACEMENT
      end
      i = i + k
    end
  end
  return table.concat(out)
end

local function time_text(ms)
  local n = tonumber(tostring(ms))
  if n == nil then return "" end
  local secs = math.floor(n / 1000)
  local ok, text = pcall(os.date, "!%Y-%m-%d %H:%M:%S", secs)
  if not ok or text == nil then return "" end
  return string.format(" (%s.%03d UTC)", text, n - secs * 1000)
end

-- Decoding errors: raised as tables, caught once per frame.
local function short(field, offset, need, have)
  error({ short = true, field = field, offset = offset, need = need, have = have }, 0)
end

local function bad(field, offset, text)
  error({ bad = true, field = field, offset = offset, text = text }, 0)
end

local function short_detail(err)
  -- a count said after the name, "(3 entries)", stays as it is
  local name, counted = err.field:match("^(.-)( %(.*)$")
  if not name then name, counted = err.field, "" end
  return string.format("%s needs %d bytes at offset %d, %d left",
    struct_title(name) .. counted, err.need, err.offset, math.max(err.have, 0))
end

local function short_message(err)
  return "frame too short: " .. short_detail(err)
end

-- kind: a kind of finding of SPEC.experts (the decoder's: malformed, undecoded, api_error).
local function note(ctx, severity, kind, message)
  ctx.notes[#ctx.notes + 1] = { severity = severity, kind = kind, message = message }
end

-- JSON, read leniently as the servers' own clients do (object keys may be bare words or
-- numbers). Objects keep their keys' order: { keys = {...}, map = {...} } with JSON_OBJECT
-- as metatable; arrays are plain lists with JSON_ARRAY; null is JSON_NULL.
local JSON_OBJECT, JSON_ARRAY, JSON_NULL = {}, {}, setmetatable({}, {})

-- Twin of lenient_json.too_deep: deeper JSON is refused (Lua's own stack would overflow).
local JSON_MAX_DEPTH = 200

local function json_too_deep(text)
  local _, opens = text:gsub("[%[{]", "")
  if opens <= JSON_MAX_DEPTH then return false end
  local depth, in_string, escaped = 0, false, false
  for i = 1, #text do
    local c = text:sub(i, i)
    if in_string then
      if escaped then escaped = false
      elseif c == "\\" then escaped = true
      elseif c == '"' then in_string = false end
    elseif c == '"' then in_string = true
    elseif c == "[" or c == "{" then
      depth = depth + 1
      if depth > JSON_MAX_DEPTH then return true end
    elseif c == "]" or c == "}" then depth = depth - 1 end
  end
  return false
end

local function json_parse(text)
  if json_too_deep(text) then error({ json = true, pos = 0, text = "nested too deeply" }, 0) end
  local pos, n = 1, #text
  local lenient = false
  local function fail(message) error({ json = true, pos = pos - 1, text = message }, 0) end
  local function skip()
    local _, stop = text:find("^[ \t\r\n]*", pos)
    pos = stop + 1
  end
  local value
  local function string_value()
    local out, i = {}, pos + 1
    while true do
      local c = text:sub(i, i)
      if c == "" then fail("Unterminated string starting at") end
      if c == '"' then break end
      if c == "\\" then
        local e = text:sub(i + 1, i + 1)
        local map = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }
        if map[e] then
          out[#out + 1] = map[e]
          i = i + 2
        elseif e == "u" then
          local code = tonumber(text:sub(i + 2, i + 5), 16)
          if code == nil then fail("Invalid \\uXXXX escape") end
          i = i + 6
          if code >= 0xD800 and code <= 0xDBFF and text:sub(i, i + 1) == "\\u" then
            local low = tonumber(text:sub(i + 2, i + 5), 16)
            if low and low >= 0xDC00 and low <= 0xDFFF then
              code = 0x10000 + (code - 0xD800) * 1024 + (low - 0xDC00)
              i = i + 6
            end
          end
          if code < 0x80 then out[#out + 1] = string.char(code)
          elseif code < 0x800 then
            out[#out + 1] = string.char(0xC0 + math.floor(code / 64), 0x80 + code % 64)
          elseif code < 0x10000 then
            out[#out + 1] = string.char(0xE0 + math.floor(code / 4096), 0x80 + math.floor(code / 64) % 64,
              0x80 + code % 64)
          else
            out[#out + 1] = string.char(0xF0 + math.floor(code / 262144), 0x80 + math.floor(code / 4096) % 64,
              0x80 + math.floor(code / 64) % 64, 0x80 + code % 64)
          end
        else
          fail("Invalid \\escape")
        end
      else
        out[#out + 1] = c
        i = i + 1
      end
    end
    pos = i + 1
    return table.concat(out)
  end
  value = function()
    skip()
    local c = text:sub(pos, pos)
    if c == "{" then
      pos = pos + 1
      local obj = setmetatable({ keys = {}, map = {} }, JSON_OBJECT)
      skip()
      if text:sub(pos, pos) == "}" then pos = pos + 1 return obj end
      while true do
        skip()
        local key
        if text:sub(pos, pos) == '"' then
          key = string_value()
        else
          local word = text:match("^[%w_%$%-%+%.]+", pos)
          if word == nil then fail("Expecting property name enclosed in double quotes") end
          key = word
          pos = pos + #word
          lenient = true
        end
        skip()
        if text:sub(pos, pos) ~= ":" then fail("Expecting ':' delimiter") end
        pos = pos + 1
        if obj.map[key] == nil then obj.keys[#obj.keys + 1] = key end
        obj.map[key] = value()
        skip()
        local d = text:sub(pos, pos)
        pos = pos + 1
        if d == "}" then return obj end
        if d ~= "," then pos = pos - 1 fail("Expecting ',' delimiter") end
      end
    elseif c == "[" then
      pos = pos + 1
      local arr = setmetatable({}, JSON_ARRAY)
      skip()
      if text:sub(pos, pos) == "]" then pos = pos + 1 return arr end
      while true do
        arr[#arr + 1] = value()
        skip()
        local d = text:sub(pos, pos)
        pos = pos + 1
        if d == "]" then return arr end
        if d ~= "," then pos = pos - 1 fail("Expecting ',' delimiter") end
      end
    elseif c == '"' then
      return string_value()
    elseif text:sub(pos, pos + 3) == "true" then pos = pos + 4 return true
    elseif text:sub(pos, pos + 4) == "false" then pos = pos + 5 return false
    elseif text:sub(pos, pos + 3) == "null" then pos = pos + 4 return JSON_NULL
    else
      local num = text:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
      if num == nil or num == "" then fail("Expecting value") end
      pos = pos + #num
      local v = tonumber(num)
      if v == nil then fail("Expecting value") end
      if not num:find("[%.eE]") then v = int(v) end
      return v
    end
  end
  local result = value()
  skip()
  if pos <= n then fail("Extra data") end
  return result, lenient
end

-- Keyed objects (a JSON object, key/value text, a header's map of entries) turned into the
-- members a struct declares, converted as the protocol's servers read them.
local REVERSE = {}
for name, values in pairs(SPEC.enums) do
  REVERSE[name] = {}
  for value, label in pairs(values) do REVERSE[name][label] = value end
end

local keyed_fields, keyed_value

local function entry_key(spec) return spec.entry or spec.name end

local function java_text(raw)
  if raw == true then return "true" elseif raw == false then return "false" end
  if type(raw) == "number" then return tostring(int(raw)) end
  return raw
end

keyed_value = function(spec, raw, notes)
  local t = spec.type
  if raw == nil or raw == JSON_NULL then return nil end
  if spec.width then
    if type(raw) == "number" then return int(raw) end
    if type(raw) == "string" then
      local text = raw:match("^%s*(.-)%s*$")
      for _, enum in ipairs({ spec.enum or false, spec.response_enum or false }) do
        if enum and REVERSE[enum] and REVERSE[enum][text] ~= nil then return REVERSE[enum][text] end
      end
      local n = tonumber(text)
      if n ~= nil and text:match("^[-+]?%d+$") then return int(n) end
      if spec.display == "name" and spec.enum then
        notes[#notes + 1] = spec.name .. ": " .. quoted(raw) .. " is not a name the spec knows"
        return raw
      end
    end
    notes[#notes + 1] = spec.name .. ": " .. quoted(tostring(java_text(raw))) .. " is not a number"
    return raw
  end
  if t == "string" then
    if spec.secret and raw ~= "" then return SPEC.masked end  -- a credential is never shown
    return java_text(raw)
  end
  if t == "bool" then
    if raw == true or raw == false then return raw end
    local text = type(raw) == "string" and raw:lower() or nil
    if text == "true" then return true end
    -- What the sender meant, and what Java's Boolean.parseBoolean reads.
    if text == "false" or text == "0" or text == "" then return false end
    notes[#notes + 1] = spec.name .. ": " .. quoted(tostring(java_text(raw))) .. " is not true or false (Java reads it as false)"
    return false
  end
  if t == "array" and spec.of then
    if getmetatable(raw) ~= JSON_ARRAY then return raw end
    local out = {}
    for i, item in ipairs(raw) do out[i] = keyed_value(spec.of, item, notes) end
    return out
  end
  if t == "map" then
    if getmetatable(raw) ~= JSON_OBJECT then return raw end
    local out = setmetatable({ keys = {}, map = {} }, JSON_OBJECT)
    for _, k in ipairs(raw.keys) do
      local key = keyed_value(spec.key, k, notes)
      out.keys[#out.keys + 1] = key
      out.map[key] = keyed_value(spec.value, raw.map[k], notes)
    end
    return out
  end
  if (t == "struct" or t == "json") and spec.struct then
    if getmetatable(raw) ~= JSON_OBJECT then return raw end
    return keyed_fields(SPEC.structs[spec.struct], raw, notes)
  end
  if t == "pairs" and spec.struct then
    if type(raw) ~= "string" then return raw end
    local obj = setmetatable({ keys = {}, map = {} }, JSON_OBJECT)
    local between, within = spec.separators[1], spec.separators[2]
    local start = 1
    while start <= #raw do
      local stop = raw:find(between, start, true) or (#raw + 1)
      local piece = raw:sub(start, stop - 1)
      if piece ~= "" then
        local cut = piece:find(within, 1, true)
        local k, v = piece, ""
        if cut then k, v = piece:sub(1, cut - 1), piece:sub(cut + #within) end
        if obj.map[k] == nil then obj.keys[#obj.keys + 1] = k end
        obj.map[k] = v
      end
      start = stop + #between
    end
    return keyed_fields(SPEC.structs[spec.struct], obj, notes)
  end
  return raw
end

keyed_fields = function(specs, obj, notes)
  local out = { __order = {} }
  local taken, rest_spec = {}, nil
  for _, spec in ipairs(specs) do
    if spec.rest then
      rest_spec = spec
    else
      local key = entry_key(spec)
      local raw = obj.map[key]
      if raw ~= nil then
        taken[key] = true
        out[spec.name] = keyed_value(spec, raw, notes)
        out.__order[#out.__order + 1] = spec.name
      end
    end
  end
  local left = setmetatable({ keys = {}, map = {} }, JSON_OBJECT)
  for _, k in ipairs(obj.keys) do
    if not taken[k] then
      left.keys[#left.keys + 1] = k
      left.map[k] = obj.map[k]
    end
  end
  if #left.keys > 0 then
    if rest_spec then
      out[rest_spec.name] = keyed_value(rest_spec, left, notes)
      out.__order[#out.__order + 1] = rest_spec.name
    else
      local names = {}
      for _, k in ipairs(left.keys) do names[#names + 1] = tostring(k) end
      notes[#notes + 1] = "keys no field names: " .. table.concat(names, ", ")
    end
  end
  return out
end

-- Items for values decoded from a keyed object: they span the object's bytes.
local show_keyed

local function keyed_label(spec)
  local shown = struct_title(spec.name)
  if spec.entry and spec.entry:gsub("_", ""):lower() ~= spec.name:gsub("_", ""):lower() then
    shown = shown .. " (" .. spec.entry .. ")"
  end
  return shown
end

local function add_value(tree, spec, range, value, name)
  -- One leaf item: a registry field with this value, or text when Wireshark's type cannot hold it.
  local field = F[name or spec.name]
  if field == nil or spec.struct then
    -- no field, or a struct's holder given something else than an object: text
    return tree:add(range, (NAME_TITLE[name or spec.name] or spec.name) .. ": " .. tostring(java_text(value)))
  end
  if spec.width then
    if type(value) ~= "number" then return tree:add(range, keyed_label(spec) .. ": " .. tostring(value)) end
    -- Wireshark's 64-bit fields take Int64/UInt64 values, not Lua numbers.
    if spec.type == "int64" then value = Int64.new(value) elseif spec.type == "uint64" then value = UInt64.new(value) end
    return tree:add(field, range, value)
  end
  if spec.type == "bool" then
    if type(value) ~= "boolean" then return tree:add(range, keyed_label(spec) .. ": " .. tostring(value)) end
    return tree:add(field, range, value)
  end
  if type(value) == "string" then return tree:add(field, range, value) end
  return tree:add(field, range)
end

show_keyed = function(tree, spec, value, range, label)
  if tree == nil or value == nil then return end
  local t = spec.type
  if type(value) == "table" and value.__order and spec.struct then
    local holder = tree:add(F[spec.name] or F.payload, range)
    holder:set_text(label or keyed_label(spec))
    for _, member in ipairs(SPEC.structs[spec.struct]) do
      if value[member.name] ~= nil then show_keyed(holder, member, value[member.name], range) end
    end
    return holder
  end
  if t == "array" and type(value) == "table" and spec.of then
    -- A text item: each element is an item of the field, as Python's JSON lists them.
    local holder = tree:add(range, keyed_label(spec) .. ": " .. #value .. " items")
    for i, item in ipairs(value) do
      if spec.of.struct then
        show_keyed(holder, spec.of, item, range, string.format("%s [%d]", struct_title(spec.of.struct), i - 1))
      else
        add_value(holder, spec.of, range, item, spec.name)
      end
    end
    return holder
  end
  if t == "map" and getmetatable(value) == JSON_OBJECT then
    local holder = tree:add(F[spec.name], range)
    holder:set_text(keyed_label(spec) .. ": " .. #value.keys .. " entries")
    for _, k in ipairs(value.keys) do
      local entry = holder:add(range, "")
      add_value(entry, spec.key, range, k, spec.name .. ".key")
      local v = value.map[k]
      if getmetatable(v) ~= JSON_OBJECT and getmetatable(v) ~= JSON_ARRAY then
        add_value(entry, spec.value, range, v, spec.name .. ".value")
      end
      entry:set_text(tostring(k) .. ": " .. tostring(java_text(v)))
    end
    return holder
  end
  local item = add_value(tree, spec, range, value)
  if item and spec.entry and F[spec.name] then item:append_text(" (" .. spec.entry .. ")") end
  return item
end

local function json_tree(tree, value, range, label)
  -- JSON with no declared shape: one text item per key or element.
  if tree == nil then return end
  local mt = getmetatable(value)
  if mt == JSON_OBJECT then
    local holder = tree:add(range, label .. (#value.keys == 0 and ": {}" or ""))
    for _, k in ipairs(value.keys) do json_tree(holder, value.map[k], range, tostring(k)) end
  elseif mt == JSON_ARRAY then
    local holder = tree:add(range, label .. (#value == 0 and ": []" or ""))
    for i, item in ipairs(value) do json_tree(holder, item, range, "[" .. (i - 1) .. "]") end
  elseif value == JSON_NULL then
    tree:add(range, label .. ": None")
  elseif type(value) == "string" then
    tree:add(range, label .. ': "' .. value .. '"')
  else
    tree:add(range, label .. ": " .. (value == true and "True" or value == false and "False" or tostring(value)))
  end
end

-- Minimum sizes, as layout.py computes them, to refuse impossible counts before reading.
local min_size
local function fields_min(specs, version)
  local total = 0
  for _, spec in ipairs(specs) do
    if (spec.since or 1) <= version and not spec.when and not spec.optional and not spec.entry then
      total = total + min_size(spec, version)
    end
  end
  return total
end

local FIXED_WIDTHS = { bool = 1, ipv4 = 4, ipv6 = 16 }

min_size = function(spec, version)
  local t = spec.type
  if spec.width then return spec.width end
  if FIXED_WIDTHS[t] then return FIXED_WIDTHS[t] end
  if spec.prefix_width then return spec.prefix_width end
  if t == "raw" then return type(spec.size) == "number" and spec.size or 0 end
  -- (a header's hook is not loaded yet when the header's size is first computed: at least 0)
  if t == "hook" then return HOOKS[spec.hook] and HOOKS[spec.hook].min_size or 0 end
  if t == "struct" then return fields_min(SPEC.structs[spec.struct], version) end
  return 0
end
-- Arrays of plain structs without a tree -----------------------------------------------
-- With no tree kept (ctx.lite) an array of structs whose members are plain integers, or hooks
-- that can step over their bytes (skip), is read from one copy of its bytes: no TvbRange per
-- value. Anything else about an element (bytes ending inside it, a 64-bit value of 2^46 or more,
-- a hook that cannot step over it) leaves it and the rest to the general reader, which explains
-- it. One table, not locals: the plugin's main chunk is near Lua's limit of 200 locals.
local LITE = { plans = {}, measured = {} }
-- Arrays of integers the loop read whole, each one more than the one before (a Publish frame's
-- ids, a confirm's): the tracker takes them as one run without checking each id again.
LITE.runs = setmetatable({}, { __mode = "k" })

-- An element's plan at a version: { name, width, signed }, { name, prefix, signed } (a string)
-- and { name, skip } steps of a struct, one nameless step for a plain integer; or false.
LITE.step = function(m)
  local plain = not (m.mask_off or m.bits or m.const ~= nil or m.when or m.optional or m.entry
    or m.length_of or m.inline or m.hook or m.secret)
  if m.width and plain and (m.width == 1 or m.width == 2 or m.width == 4 or m.width == 8) then
    return { name = m.name, width = m.width, signed = m.type:sub(1, 1) == "i" }
  elseif m.type == "string" and plain and not m.size and (m.prefix_width == 2 or m.prefix_width == 4) then
    return { name = m.name, prefix = m.prefix_width, signed = m.prefix_signed == true }
  elseif m.type == "hook" and not m.inline and HOOKS[m.hook] and HOOKS[m.hook].skip then
    local hook = HOOKS[m.hook]
    return { name = m.name, skip = hook.skip, source = hook.skip_source, head = hook.skip_head }
  end
  return nil
end

LITE.plan = function(element, version)
  local by_version = LITE.plans[element] or {}
  LITE.plans[element] = by_version
  local plan = by_version[version]
  if plan ~= nil then return plan end
  plan = {}
  if element.type == "struct" then
    for _, m in ipairs(SPEC.structs[element.struct]) do
      if (m.since or 1) <= version then
        local step = LITE.step(m)
        if step == nil then
          plan = false
          break
        end
        plan[#plan + 1] = step
      end
    end
  else
    local step = element.width and LITE.step(element)
    plan = step and { step, scalar = true } or false
  end
  if plan and not plan.scalar then
    -- One integer and members stepped over (a Publish's messages: an id, then its entry): the
    -- element is its integer alone (projected), with no table each; path_values and the tracker
    -- take such arrays as the structs they stand for.
    local ints, skipped = {}, 0
    for k, step in ipairs(plan) do
      if step.width then ints[#ints + 1] = k elseif step.skip then skipped = skipped + 1 end
    end
    if #ints == 1 and #ints + skipped == #plan then plan.projected, plan.projected_k = plan[ints[1]].name, ints[1] end
  end
  by_version[version] = plan
  return plan
end

-- An integer of a type (uint8 .. int64) at byte i of s, as read_int gives it; nil for a 64-bit
-- value read_int gives as UInt64 or Int64 that a number would not keep exact (2^46 or more, or
-- negative), which the caller reads from a TvbRange. Bytes put together without ^ or floats, so
-- Lua 5.4 keeps them integers.
LITE.int_at = function(s, i, width, t)
  local byte = string.byte
  if width == 1 then
    local a = byte(s, i)
    if a >= 128 and t == "int8" then return a - 256 end
    return a
  elseif width == 2 then
    local a, b = byte(s, i, i + 1)
    if LITTLE then a, b = b, a end
    if a >= 128 and t == "int16" then return (a * 256 + b) - 65536 end
    return a * 256 + b
  elseif width == 4 then
    local a, b, c, d = byte(s, i, i + 3)
    if LITTLE then a, b, c, d = d, c, b, a end
    local v = ((a * 256 + b) * 256 + c) * 256 + d
    if a >= 128 and t == "int32" then return v - 4294967296 end
    return v
  elseif width == 8 then
    local a, b, c, d, e, f, g, h = byte(s, i, i + 7)
    if LITTLE then a, b, c, d, e, f, g, h = h, g, f, e, d, c, b, a end
    if a ~= 0 or b ~= 0 or c >= 64 then return nil end
    return ((((c * 256 + d) * 256 + e) * 256 + f) * 256 + g) * 256 + h
  end
  return nil
end

-- A value as the tracker keys it: the same for a 64-bit value read with a tree (UInt64) or
-- without (a number below 10^12), so a pass that meets both still pairs them.
LITE.key = function(item)
  if type(item) == "number" then return item end
  local text = tostring(item)
  if #text <= 12 and type(item) == "userdata" then return tonumber(text) or text end
  return text
end

-- With a tree, a package's reader of an array's leading elements where they have the shape most
-- traffic has (a Publish's simple entries): struct name -> fn(holder, tvb, pos, limit, count,
-- items, version, ctx, name), which shows and stores as many as it can as the general reader
-- would, and returns how many and where they end; the general reader takes (and explains) the rest.
LITE.shown = {}

-- Elements from [pos, limit) into items while they are plain: how many, and where they end.
-- Each plan's loop is written out as Lua source once and compiled (LITE.compile): a million
-- elements then cost no per-step dispatch, and each element's table is built at its size.
LITE.read_array = function(plan, tvb, pos, limit, count, items)
  local n = limit - pos
  if n <= 0 then return 0, pos end
  plan.fn = plan.fn or LITE.compile(plan)
  local index, i, breaks = plan.fn(tvb:raw(pos, n), n, count, items)
  local whole = not ((count ~= nil and index < count) or (count == nil and i <= n))
  local name = plan.projected
  if name then
    if not whole then
      -- The general reader takes the rest, element by element, as tables: these become theirs.
      for k = 1, index do items[k] = { [name] = items[k] } end
    else
      items.projected = name
    end
  end
  if whole and breaks == 1 then LITE.runs[items] = true end
  return index, pos + i - 1
end

-- A plan's loop. Every element is read whole or not at all: where one does not fit, or holds
-- what the general reader must explain, the loop returns how many it read and where that one
-- starts. Integers are put together from bytes without ^ or floats, so Lua 5.4 keeps them
-- integers; a 64-bit value must be below 10^12 (LITE.key). Consecutive integers, and the first
-- four bytes of a step over a hook's bytes after them (its skip_head, HEAD32 in its source), are
-- read by one string.byte call behind one bounds check (Struct.unpack took as long, with more
-- instructions). A counted array is a numeric for loop, which tests no condition per element.
LITE.GROUP_MAX = 32  -- bytes of one call: its values are locals, and a function has 200 at most
LITE.compile = function(plan)
  local body, names, skips = {}, {}, {}
  local function put(text) body[#body + 1] = text end
  local letters = { "a", "b", "c", "d", "e", "f", "g", "h" }
  -- v<k> from the bytes named by vars (in wire order)
  local function int_value(k, width, signed, vars)
    if LITTLE and width > 1 then
      local reversed = {}
      for j = width, 1, -1 do reversed[#reversed + 1] = vars[j] end
      vars = reversed
    end
    local expr, first = vars[1], 1
    if width == 8 then
      -- 2^46 or more, or negative: the general reader's (the top two bytes here, the third by
      -- the test of 10^12 below: 64 there is 2^46 and more)
      put(string.format("      if %s + %s ~= 0 then FAIL end\n", vars[1], vars[2]))
      expr, first = vars[3], 3
    end
    for j = first + 1, width do expr = "(" .. expr .. ") * 256 + " .. vars[j] end
    put(string.format("      v%d = %s\n", k, expr))
    if width == 8 then
      put(string.format("      if v%d >= 1000000000000 then FAIL end\n", k))
    elseif signed then
      local range = ({ [1] = "256", [2] = "65536", [4] = "4294967296" })[width]  -- text: 5.4 keeps it an integer
      put(string.format("      if %s >= 128 then v%d = v%d - %s end\n", vars[1], k, k, range))
    end
  end
  -- A hook's step as source (VALUE, AFTER, FAIL its placeholders; HEAD32 its first four bytes,
  -- read, after a test that they are there, by the group before it or here), in a block of its own.
  local function skip_source(k, step, head)
    local body_text = step.source:gsub("VALUE", "v" .. k):gsub("AFTER", "at")
    local read = ""
    if step.head and head == nil then
      head = "head" .. k
      read = string.format("      if at + 3 > n then FAIL end\n      local %s, %s, %s, %s = byte(s, at, at + 3)\n"
        .. "      local %s = ((%s * 256 + %s) * 256 + %s) * 256 + %s\n",
        head .. "_1", head .. "_2", head .. "_3", head .. "_4", head, head .. "_1", head .. "_2", head .. "_3", head .. "_4")
    end
    if head then body_text = body_text:gsub("HEAD32", head) end
    put("    do\n" .. read .. body_text .. "    end\n")
  end
  local k = 1
  while k <= #plan do
    local step = plan[k]
    if step.width then
      -- a group: integers from k on, and the head of a hook's step right after them
      local group, bytes = {}, 0
      while plan[k] and plan[k].width and bytes + plan[k].width <= LITE.GROUP_MAX do
        group[#group + 1] = k
        bytes = bytes + plan[k].width
        k = k + 1
      end
      local after = plan[k]
      local head = after and after.source and after.head and bytes + 4 <= LITE.GROUP_MAX
      for _, j in ipairs(group) do put(string.format("    local v%d\n", j)) end
      if head then put(string.format("    local v%d\n", k)) end
      put(string.format("    do\n      if at + %d > n then FAIL end\n", bytes + (head and 4 or 0) - 1))
      local head_name = "head" .. k
      local vars, all = {}, {}
      for _, j in ipairs(group) do
        vars[j] = {}
        for b = 1, plan[j].width do
          vars[j][b] = letters[b] .. j
          all[#all + 1] = vars[j][b]
        end
      end
      local head_vars = {}
      if head then
        for b = 1, 4 do
          head_vars[b] = head_name .. "_" .. b
          all[#all + 1] = head_vars[b]
        end
      end
      put(string.format("      local %s = byte(s, at, at + %d)\n", table.concat(all, ", "), #all - 1))
      for _, j in ipairs(group) do int_value(j, plan[j].width, plan[j].signed, vars[j]) end
      if head then
        put(string.format("      local %s = ((%s * 256 + %s) * 256 + %s) * 256 + %s\n", head_name,
          head_vars[1], head_vars[2], head_vars[3], head_vars[4]))
      end
      put(string.format("      at = at + %d\n", bytes))
      if head then
        skip_source(k, after, head_name)
        k = k + 1
      end
      put("    end\n")
    else
      put(string.format("    local v%d\n", k))
      if step.prefix then
        put("    do\n")
        local vars = {}
        for b = 1, step.prefix do vars[b] = letters[b] end
        put(string.format("      if at + %d > n then FAIL end\n", step.prefix - 1))
        put(string.format("      local %s = byte(s, at, at + %d)\n", table.concat(vars, ", "), step.prefix - 1))
        int_value(k, step.prefix, step.signed, vars)
        put(string.format("      at = at + %d\n    end\n", step.prefix))
        -- v is the string's length: -1 a null where the prefix is signed
        put(string.format("    if v%d >= 0 then\n", k))
        put(string.format("      if at + v%d - 1 > n then FAIL end\n", k))
        put(string.format("      local text = sub(s, at, at + v%d - 1)\n", k))
        put("      if not valid(text) then FAIL end\n")
        put(string.format("      at, v%d = at + v%d, text\n", k, k))
        put(string.format("    elseif v%d == -1 and %s then\n      v%d = nil\n", k, tostring(step.signed), k))
        put("    else\n      FAIL\n    end\n")
      elseif step.source then
        skip_source(k, step, nil)
      else
        skips[#skips + 1] = step.skip
        put(string.format("    local after%d\n    v%d, after%d = skips[%d](s, at, n)\n", k, k, k, #skips))
        put(string.format("    if v%d == nil then FAIL end\n    at = after%d\n", k, k))
      end
      k = k + 1
    end
  end
  for j, step in ipairs(plan) do names[j] = string.format("[%q] = v%d", step.name or "", j) end
  local store
  -- An array of integers counts where a value is not one more than the one before (breaks: 1
  -- where they all follow on from the first).
  local follow = ""
  if plan.scalar then
    store = "v1"
  elseif plan.projected then
    store = "v" .. plan.projected_k
  else
    store = "{ " .. table.concat(names, ", ") .. " }"
  end
  if plan.scalar or plan.projected then
    follow = string.format("    if %s ~= follows then breaks = breaks + 1 end\n    follows = %s + 1\n", store, store)
  end
  local element = table.concat(body)
  local src = {
    "local byte, sub, valid = string.byte, string.sub, ...\nlocal skips = select(2, ...)\n",
    "return function(s, n, count, items)\n  local i, follows, breaks = 1, nil, 0\n",
    -- counted: elements 1..count while they are plain
    "  if count ~= nil then\n    for index = 1, count do\n    local at = i\n",
    (element:gsub("FAIL", "return index - 1, i, breaks")),
    "    items[index] = " .. store .. "\n" .. follow .. "    i = at\n    end\n    return count, i, breaks\n  end\n",
    -- not counted: elements to the end of the bytes
    "  local index = 0\n  while i <= n do\n    local at = i\n",
    (element:gsub("FAIL", "return index, i, breaks")),
    "    index = index + 1\n    items[index] = " .. store .. "\n" .. follow .. "    i = at\n  end\n  return index, i, breaks\nend\n",
  }
  local chunk = assert(load(table.concat(src), "=lite plan", "t"))
  return chunk(utf8_valid, skips)
end

-- Field decoding ---------------------------------------------------------------------

local read_value, decode_fields

local function read_count(tvb, pos, stop, name, element_min, ctx, spec)
  local width = spec.prefix_width or 4
  if stop - pos < width then short(name, pos, width, stop - pos) end
  local count = prefix_of(tvb(pos, width), spec)
  pos = pos + width
  if count == -1 and spec.prefix_signed then return nil, pos end
  if count < 0 then bad(name, pos - width, name .. " has negative count " .. count) end
  local room = math.max(stop, ctx.declared_end or 0) - pos
  if count * element_min > room then
    short(name .. " (" .. count .. " entries)", pos, count * element_min, stop - pos)
  end
  return count, pos
end

-- A prefix counting bytes: where what it measures ends (nil for a null).
local function read_span(tvb, pos, stop, name, spec)
  local width = spec.prefix_width
  if stop - pos < width then short(name, pos, width, stop - pos) end
  local length = prefix_of(tvb(pos, width), spec)
  pos = pos + width
  if length == -1 and spec.prefix_signed then return nil, pos end
  if length < 0 then bad(name, pos - width, name .. " has negative length " .. length) end
  if stop - pos < length then short(name, pos, length, stop - pos) end
  return pos + length, pos
end

local function add_null(tree, tvb, pos, width, name)
  if tree then tree:add(tvb(pos, width), (NAME_TITLE[name] or name) .. ": null") end
end

-- Text of a string field, checked as Python checks it; the item shows it.
local function read_text(tvb, pos, length, tree, ctx, name, item_range)
  local text = length > 0 and tvb:raw(pos, length) or ""
  if utf8_valid(text) then
    return text, tree and tree:add(F[name], item_range, text) or nil
  end
  note(ctx, "warn", "malformed", name .. " is not valid UTF-8")
  text = py_utf8(text)
  return text, tree and tree:add(F[name], item_range, text) or nil
end

local function pairs_value(spec, text, ctx, pos)
  local notes = {}
  local value = keyed_value(spec, text, notes)
  for _, n in ipairs(notes) do note(ctx, "warn", "malformed", n) end
  return value
end

-- A struct's members into a new table (put in `into` first, so a caller keeps what was read
-- before an error); a member holding the struct's own length bounds the rest.
local function read_struct(spec, version, tvb, pos, stop, tree, ctx, name, into)
  local value = {}
  if into then into[#into + 1] = value end
  local members = SPEC.structs[spec.struct]
  local limit = stop
  -- the member holding the struct's own length, found once per struct
  local measured = LITE.measured[members]
  if measured == nil then
    measured = false
    for _, member in ipairs(members) do
      if member.length_of then measured = member end
    end
    LITE.measured[members] = measured
  end
  if measured then
    local w = measured.width
    if stop - pos < w then short(measured.name, pos, w, stop - pos) end
    local length = read_int(tvb(pos, w), measured.type)
    if length < w then bad(measured.name, pos, name .. ": " .. measured.name .. " " .. length .. " is less than its own size") end
    if stop - pos < length then short(name .. " (" .. length .. " bytes)", pos, length, stop - pos) end
    limit = pos + length
  end
  local after = decode_fields(members, version, tvb, pos, limit, value, tree, ctx)
  if measured then
    if after < limit then
      note(ctx, "warn", "malformed", string.format("%s: %d bytes after its last field", name, limit - after))
    end
    after = limit
  end
  return value, after
end

-- How far an array or map reaches: its element count, or where its bytes end (a prefix
-- counting bytes, or no prefix: the rest); a null prefix gets its item and says so.
local function read_extent(tvb, pos, stop, name, spec, element_min, ctx, tree)
  local count, span_end
  if spec.prefix == "none" then
    return nil, stop, pos, false
  elseif spec.prefix_counts == "bytes" then
    span_end, pos = read_span(tvb, pos, stop, name, spec)
    if span_end ~= nil then return nil, span_end, pos, false end
  else
    count, pos = read_count(tvb, pos, stop, name, element_min, ctx, spec)
    if count ~= nil then return count, nil, pos, false end
  end
  add_null(tree, tvb, pos - spec.prefix_width, spec.prefix_width, name)
  return nil, nil, pos, true
end

-- One value of a spec at pos; adds its items under tree (which may be nil).
read_value = function(spec, version, tvb, pos, stop, tree, ctx, name)
  local t = spec.type
  local width = spec.width
  if width then
    if stop - pos < width then short(name, pos, width, stop - pos) end
    if tree == nil and ctx.raw_tvb == tvb and pos + width <= ctx.raw_n then
      -- No item: from the copy of the frame's first bytes (no TvbRange), where it holds them.
      local value = LITE.int_at(ctx.raw, pos + 1, width, t)
      if value ~= nil then return value, pos + width end
    end
    local value
    if width == 8 and tree then
      -- As the pass without a tree reads it: a number where a double holds it exactly (a UInt64
      -- is a userdata with a finalizer, turned back into a number for each key made of it).
      local s, at = ctx.raw, pos + 1
      if ctx.raw_tvb ~= tvb or pos + width > ctx.raw_n then s, at = tvb:raw(pos, width), 1 end
      value = LITE.int_at(s, at, width, t)
    end
    local range = tvb(pos, width)
    if value == nil then value = read_int(range, t) end
    if tree then
      local item
      if spec.mask_off and has_bit(value, spec.mask_off) then
        item = tree:add(F[name], range, value - spec.mask_off)
        item:append_text(", response (" .. hex(value, width * 2) .. ")")
      elseif LITTLE then
        item = tree:add_le(F[name], range)
      else
        item = TI.add(tree, F[name], range)
      end
      if spec.display == "time_ms" then item:append_text(time_text(value)) end
      local code = spec.enum and not spec.response_enum and type(value) == "number" and value >= 0
      if code and spec.display ~= "dec" and spec.display ~= "name" then
        -- A code as the expert texts and streamdump's tree write it, "Stream does not exist (0x02)":
        -- Wireshark's own label would give its number in decimal, or in hex to the field's width.
        item:set_text(string.format("%s: %s (0x%02x)", NAME_TITLE[name] or name,
          VS[spec.enum] and VS[spec.enum][value] or "Unknown", value))
      end
      spec.__item = item
    end
    return value, pos + width
  elseif FIXED_WIDTHS[t] then
    local size = FIXED_WIDTHS[t]
    if stop - pos < size then short(name, pos, size, stop - pos) end
    local range = tvb(pos, size)
    local value
    if t == "bool" then
      local byte = uint_of(range)
      if byte > 1 then note(ctx, "warn", "malformed", name .. " is " .. byte .. ", not 0 or 1") end
      value = byte ~= 0
      if tree then tree:add(F[name], range, value) end
    elseif t == "ipv4" then
      value = tostring(range:ipv4())
      if tree then tree:add(F[name], range) end
    else
      value = tostring(range:ipv6())
      if tree then tree:add(F[name], range) end
    end
    return value, pos + size
  elseif t == "string" or t == "bytes" or t == "pairs" then
    local prefix = spec.prefix_width
    local span_end = read_span(tvb, pos, stop, name, spec)
    if span_end == nil then
      add_null(tree, tvb, pos, prefix, name)
      return nil, pos + prefix
    end
    local length = span_end - pos - prefix
    if t == "bytes" then
      if tree then tree:add(F[name], tvb(pos + prefix, length)) end
      return { pos = pos + prefix, len = length, tvb = tvb }, pos + prefix + length
    end
    if t == "string" then
      local text = read_text(tvb, pos + prefix, length, tree, ctx, name, tvb(pos, prefix + length))
      return text, pos + prefix + length
    end
    local text = read_text(tvb, pos + prefix, length, nil, ctx, name)
    local value = pairs_value(spec, text, ctx, pos + prefix)
    if tree then show_keyed(tree, spec, value, tvb(pos, prefix + length)) end
    return value, pos + prefix + length
  elseif t == "array" then
    local element = spec.of
    local count, span_end, null
    count, span_end, pos, null = read_extent(tvb, pos, stop, name, spec, min_size(element, version), ctx, tree)
    if null then return nil, pos end
    local prefix = spec.prefix_width or 0
    local holder
    if tree then
      holder = tree:add(tvb(pos - prefix, prefix), string.format("%s: %s", NAME_TITLE[name] or name,
        count ~= nil and tostring(count) or "…"))
    end
    local items, start, index = {}, pos - prefix, 0
    local limit = span_end or stop
    local plan = ctx.lite and holder == nil and LITE.plan(element, version)
    if plan then index, pos = LITE.read_array(plan, tvb, pos, limit, count, items) end
    local shown = holder and element.type == "struct" and LITE.shown[element.struct]
    if shown then index, pos = shown(holder, tvb, pos, limit, count, items, version, ctx, name) end
    local ok, err = pcall(function()
      while (count ~= nil and index < count) or (count == nil and pos < limit) do
        if element.type == "struct" then
          local child
          if holder then
            child = TI.add(holder, F[name], tvb(pos, 0))
            TI.set_text(child, struct_title(element.struct) .. " [" .. index .. "]")
          end
          local at = pos
          local ok2, value, after = pcall(read_struct, element, version, tvb, pos, limit, child, ctx, name, items)
          if not ok2 then
            if child and type(value) == "table" and value.offset then child:set_len(math.max(0, math.min(value.offset, limit) - at)) end
            error(value, 0)
          end
          pos = after
          if child then TI.set_len(child, pos - at) end
        else
          local value
          value, pos = read_value(element, version, tvb, pos, limit, holder, ctx, name)
          items[#items + 1] = value
        end
        index = index + 1
      end
    end)
    if holder then
      holder:set_len(math.max(prefix, math.min(pos, limit) - start))
      if count == nil then holder:set_text(string.format("%s: %d", NAME_TITLE[name] or name, #items)) end
    end
    if not ok then error(err, 0) end
    return items, pos
  elseif t == "map" then
    local count, span_end, null
    count, span_end, pos, null = read_extent(tvb, pos, stop, name, spec,
      min_size(spec.key, version) + min_size(spec.value, version), ctx, tree)
    if null then return nil, pos end
    local prefix = spec.prefix_width or 0
    local holder
    local skip = ctx.entries_field == name and ctx.taken_entries or nil
    if tree and not (skip and not skip.__any) then holder = tree:add(F[name], tvb(pos - prefix, prefix)) end
    local items = setmetatable({ keys = {}, map = {} }, JSON_OBJECT)
    local start = pos - prefix
    local limit = span_end or stop
    local shown = 0
    local ok, err = pcall(function()
      local index = 0
      while (count ~= nil and index < count) or (count == nil and pos < limit) do
        local at = pos
        local entry
        local k, v
        local kpos = pos
        k, pos = read_value(spec.key, version, tvb, pos, limit, nil, ctx, name .. ".key")
        local vpos = pos
        v, pos = read_value(spec.value, version, tvb, pos, limit, nil, ctx, name .. ".value")
        if k == nil then k = "null" end
        if items.map[k] ~= nil then note(ctx, "warn", "malformed", name .. ": duplicate key " .. quoted(tostring(k))) end
        if items.map[k] == nil then items.keys[#items.keys + 1] = k end
        items.map[k] = v
        if holder and not (skip and skip[k]) then
          entry = holder:add(tvb(at, 0), "")
          read_value(spec.key, version, tvb, kpos, limit, entry, { notes = {} }, name .. ".key")
          read_value(spec.value, version, tvb, vpos, limit, entry, { notes = {} }, name .. ".value")
          local shown_value = type(v) == "table" and "<bytes>" or tostring(v)
          entry:set_text(tostring(k) .. ": " .. shown_value)
          entry:set_len(pos - at)
          shown = shown + 1
        end
        index = index + 1
      end
    end)
    if holder then
      holder:append_text(": " .. shown .. " entries")
      holder:set_len(math.max(prefix, math.min(pos, limit) - start))
    end
    if not ok then error(err, 0) end
    return items, pos
  elseif t == "struct" then
    local child
    if tree then child = tree:add(F[name], tvb(pos, 0)) end
    local at = pos
    local ok, value, after = pcall(read_struct, spec, version, tvb, pos, stop, child, ctx, name)
    if not ok then
      if child and type(value) == "table" and value.offset then child:set_len(math.max(0, math.min(value.offset, stop) - at)) end
      error(value, 0)
    end
    if child then child:set_len(after - at) end
    return value, after
  end
  error("no reader for type " .. tostring(t))
end

-- A text protocol's `size: line` or `size: word` field: its length, and the bytes after it
-- that it reads too (a line's CRLF or LF; a word's spaces and tabs, and a line end after them).
local function delimited(spec, tvb, pos, stop, ctx)
  local text = stop > pos and tvb:raw(pos, stop - pos) or ""
  if spec.size == "line" then
    if ctx.line_done then
      ctx.line_done = false
      return 0, 0
    end
    local nl = text:find("\n", 1, true)
    if not nl then short(spec.name, pos, stop - pos + 1, stop - pos) end
    local size = nl - 1
    if size > 0 and text:byte(size) == 13 then size = size - 1 end
    return size, nl - size
  end
  ctx.line_done = false
  local e = text:find("[ \t\r\n]")
  if not e then short(spec.name, pos, stop - pos + 1, stop - pos) end
  local a = e
  while a <= #text and (text:byte(a) == 32 or text:byte(a) == 9) do a = a + 1 end
  if text:sub(a, a + 1) == "\r\n" then
    a = a + 2
    ctx.line_done = true
  elseif text:sub(a, a) == "\n" then
    a = a + 1
    ctx.line_done = true
  end
  return e - 1, a - e
end

local function sized(spec, tvb, pos, stop, out, ctx)
  local size = spec.size
  if size == "line" or size == "word" then return delimited(spec, tvb, pos, stop, ctx) end
  if size == "rest" or size == nil then size = stop - pos
  elseif type(size) == "string" then size = out[size] end
  if size == nil then bad(spec.name, pos, spec.name .. ": size field " .. spec.size .. " is missing") end
  if size < 0 then return nil, 0 end
  if stop - pos < size then short(spec.name, pos, size, stop - pos) end
  return size, 0
end

local function read_raw(spec, tvb, pos, stop, out, ctx)
  local size, skip = sized(spec, tvb, pos, stop, out, ctx)
  if size == nil then return nil, pos end
  return { pos = pos, len = size, tvb = tvb }, pos + size + skip
end

-- Protocol Buffers: a struct whose members carry their field numbers (tag). As Google's
-- library (the Python side) reads them: proto3 scalars equal to their default say nothing, a
-- field of the wrong wire type is an unknown one, unknown fields go to the member with `rest`
-- by number ("wire type: value"), and bytes that do not parse are not the message.
local PB_WIRE = { [0] = "varint", [1] = "fixed64", [2] = "bytes", [3] = "group", [5] = "fixed32" }
local PB_WANT = { string = 2, bytes = 2, bool = 0, int32 = 0, int64 = 0, uint32 = 0, uint64 = 0, map = 2, struct = 2 }
local PB_BAD = {}

local function pb_varint(raw, i)
  -- A varint at byte i of raw: a UInt64 and the index after it.
  local value, shift = UInt64(0), 0
  while true do
    if i > #raw or shift > 63 then error(PB_BAD, 0) end
    local b = raw:byte(i)
    value = value + UInt64(b % 128):lshift(shift)
    i, shift = i + 1, shift + 7
    if b < 128 then return value, i end
  end
end

local function pb_hex(s)
  return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

local read_pb_struct

local function pb_scalar(member_type, wire, raw, i, tvb, base)
  -- One value of a scalar member; returns value, next index, and whether it is the default.
  -- Bytes are their place in tvb (raw is tvb's bytes from base on).
  if wire == 0 then
    local v
    v, i = pb_varint(raw, i)
    if member_type == "bool" then return v ~= UInt64(0), i, v == UInt64(0) end
    if member_type == "uint64" then return v, i, v == UInt64(0) end
    if member_type == "int64" then return Int64(v:lower(), v:higher()), i, v == UInt64(0) end
    local low = int(v:lower())  -- a float under Lua 5.4, which Info would show as "2.0"
    if member_type == "int32" and low >= 2147483648 then low = low - 4294967296 end
    return low, i, low == 0
  end
  local n
  n, i = pb_varint(raw, i)
  n = n:tonumber()
  if i + n - 1 > #raw then error(PB_BAD, 0) end
  if member_type == "bytes" and tvb then return { pos = base + i - 1, len = n, tvb = tvb }, i + n, n == 0 end
  local s = raw:sub(i, i + n - 1)
  return s, i + n, n == 0
end

local function pb_unknown(wire, raw, i)
  if wire == 0 then
    local v
    v, i = pb_varint(raw, i)
    return "varint: " .. tostring(v), i
  elseif wire == 1 or wire == 5 then
    local n = wire == 1 and 8 or 4
    if i + n - 1 > #raw then error(PB_BAD, 0) end
    local v = UInt64(0)
    for k = n, 1, -1 do v = v * 256 + raw:byte(i + k - 1) end
    return PB_WIRE[wire] .. ": " .. tostring(v), i + n
  elseif wire == 2 then
    local n
    n, i = pb_varint(raw, i)
    n = n:tonumber()
    if i + n - 1 > #raw then error(PB_BAD, 0) end
    return "bytes: " .. pb_hex(raw:sub(i, i + n - 1)), i + n
  end
  error(PB_BAD, 0)  -- groups and wire types 6 and 7: not what these messages hold
end

read_pb_struct = function(struct_name, raw, tvb, base)
  local members = SPEC.structs[struct_name]
  local by_tag, rest = {}, nil
  for _, m in ipairs(members) do
    if m.tag then by_tag[m.tag] = m elseif m.rest then rest = m end
  end
  local value, unknown, unknown_keys = {}, {}, {}
  local i = 1
  while i <= #raw do
    local key
    key, i = pb_varint(raw, i)
    key = key:tonumber()
    local number, wire = math.floor(key / 8), key % 8
    if number == 0 then error(PB_BAD, 0) end
    local m = by_tag[number]
    local mtype = m and (m.type == "array" and m.of.type or m.type)
    if m and PB_WANT[mtype] == wire then
      if m.type == "map" then
        local entry
        local entry_at = i
        entry, i = pb_scalar("string", 2, raw, i)
        entry_at = i - #entry  -- where the entry's bytes start in raw
        local k, v = "", nil
        local j = 1
        while j <= #entry do
          local ek
          ek, j = pb_varint(entry, j)
          ek = ek:tonumber()
          local en, ew = math.floor(ek / 8), ek % 8
          if ew ~= 2 then local _ _, j = pb_unknown(ew, entry, j)
          elseif en == 1 then
            k, j = pb_scalar("string", 2, entry, j)
            if not utf8_valid(k) then error(PB_BAD, 0) end
          elseif en == 2 then v, j = pb_scalar(m.value.type, 2, entry, j, tvb, base + entry_at - 1)
          else local _ _, j = pb_unknown(ew, entry, j) end
        end
        local map = value[m.name] or setmetatable({ keys = {}, map = {} }, JSON_OBJECT)
        if map.map[k] == nil then map.keys[#map.keys + 1] = k end
        if v == nil then v = m.value.type == "bytes" and { pos = base + entry_at - 1, len = 0, tvb = tvb } or "" end
        map.map[k] = v
        value[m.name] = map
      elseif mtype == "struct" then
        local s
        s, i = pb_scalar("string", 2, raw, i)
        local struct_name2 = m.type == "array" and m.of.struct or m.struct
        local inner = read_pb_struct(struct_name2, s, tvb, base + i - 1 - #s)
        if m.type == "array" then
          value[m.name] = value[m.name] or {}
          value[m.name][#value[m.name] + 1] = inner
        else
          value[m.name] = inner
        end
      else
        local v, default
        v, i, default = pb_scalar(mtype, wire, raw, i, tvb, base)
        -- Google's library (the Python side) refuses a message whose text is not UTF-8.
        if mtype == "string" and not utf8_valid(v) then error(PB_BAD, 0) end
        if m.type == "array" then
          value[m.name] = value[m.name] or {}
          value[m.name][#value[m.name] + 1] = v
        elseif default then
          value[m.name] = nil  -- proto3: a default value is no value
        else
          value[m.name] = v
        end
      end
    else
      local text
      text, i = pb_unknown(wire, raw, i)
      local k = tostring(number)
      if unknown[k] == nil then unknown_keys[#unknown_keys + 1] = k end
      unknown[k] = text
    end
  end
  if rest and #unknown_keys > 0 then
    value[rest.name] = setmetatable({ keys = unknown_keys, map = unknown }, JSON_OBJECT)
  end
  for _, m in ipairs(members) do
    -- Maps by key, as the Python side (its library keeps no wire order) and protobuf writers have them.
    if m.type == "map" and value[m.name] then table.sort(value[m.name].keys) end
  end
  return value
end

local function pb_show(holder, members, value, range)
  for _, m in ipairs(members) do
    local v = value[m.name]
    if v ~= nil then
      if m.type == "map" then
        local item = holder:add(F[m.name], range)
        item:set_text(struct_title(m.name) .. ": " .. #v.keys .. " entries")
        for _, k in ipairs(v.keys) do
          local entry = item:add(range, k)
          entry:add(F[m.name .. ".key"], range, k)
          if m.value.type == "bytes" then
            local b = v.map[k]
            entry:add(F[m.name .. ".value"], b.tvb(b.pos, b.len))
          else
            entry:add(F[m.name .. ".value"], range, v.map[k])
          end
        end
      elseif m.type == "struct" then
        local item = holder:add(range, struct_title(m.name))
        pb_show(item, SPEC.structs[m.struct], v, range)
      elseif m.type == "bytes" then
        holder:add(F[m.name], v.tvb(v.pos, v.len))
      else
        holder:add(F[m.name], range, v)
      end
    end
  end
end

local function read_protobuf(spec, tvb, pos, len, tree, ctx, name)
  local raw = len > 0 and tvb:raw(pos, len) or ""
  local ok, value = pcall(read_pb_struct, spec.struct, raw, tvb, pos)
  if not ok then
    if value ~= PB_BAD then error(value, 0) end
    note(ctx, "warn", "malformed", string.format("%s is not a protobuf %s: truncated or corrupt",
      struct_title(name), struct_title(spec.struct)))
    if tree then tree:add(F[name] or F.payload, tvb(pos, len)) end
    return { pos = pos, len = len, tvb = tvb }
  end
  if tree then
    local holder = tree:add(tvb(pos, len), struct_title(name))
    pb_show(holder, SPEC.structs[spec.struct], value, tvb(pos, len))
  end
  return value
end

-- A field's bytes that start with a carried protocol's magic: that protocol's plugin dissects
-- them, as a layer of its own under the packet. Whether one did.
-- Twin of streamdump/wire/wildcards.py: `*` one token, a last `>` one or more.
local function wildcard_matches(pattern, name)
  local want, have = {}, {}
  for t in (pattern .. "."):gmatch("([^.]*)%.") do want[#want + 1] = t end
  for t in (name .. "."):gmatch("([^.]*)%.") do have[#have + 1] = t end
  for i, token in ipairs(want) do
    if token == ">" and i == #want then return #have >= i end
    if i > #have or (token ~= "*" and token ~= have[i]) then return false end
  end
  return #have == #want
end

-- Twin of wildcards.captures: the fields a pattern's {field} tokens take from name (a last
-- {field>} the rest), or nil when name is not one the pattern stands for.
local function wildcard_captures(pattern, name)
  local want, have = {}, {}
  for t in (pattern .. "."):gmatch("([^.]*)%.") do want[#want + 1] = t end
  for t in (name .. "."):gmatch("([^.]*)%.") do have[#have + 1] = t end
  local out = {}
  for i, token in ipairs(want) do
    local rest = token:match("^{(.*)>}$")
    if rest and i == #want then
      if #have < i then return nil end
      out[rest] = table.concat(have, ".", i)
      return out
    end
    if i > #have then return nil end
    local field = token:match("^{(.*)}$")
    if field then
      if have[i] == "" then return nil end
      out[field] = have[i]
    elseif token ~= "*" and token ~= have[i] then
      return nil
    end
  end
  if #have ~= #want then return nil end
  return out
end

-- Twin of Hook.names: what text names by the hook's `names` patterns (the first that matches).
local function hook_names(hook, text)
  local spec = SPEC.hook_names[hook]
  if spec == nil or type(text) ~= "string" then return {} end
  for _, entry in ipairs(spec.patterns) do
    local found = wildcard_captures(entry.pattern, text)
    if found then
      for k, v in pairs(entry.set) do if found[k] == nil then found[k] = v end end
      return found
    end
  end
  return {}
end

local function carried_here(entry, out)
  if entry.by == nil then return true end
  local name = out[entry.by]
  if type(name) ~= "string" then return false end
  for _, pattern in ipairs(entry.patterns) do
    if wildcard_matches(pattern, name) then return true end
  end
  return false
end

local function carried(spec, tvb, pos, len, tree, ctx, out)
  local entries = SPEC.carries[spec.name]
  if entries == nil or PDU_CONTEXT.pinfo == nil then return false end
  for _, entry in ipairs(entries) do
    local magic = ByteArray.new(entry.magic)
    if carried_here(entry, out) and len >= magic:len() and tvb(pos, magic:len()):bytes() == magic then
      local ok, inner = pcall(Dissector.get, entry.protocol)
      if ok and inner then
        -- Dissected once this frame is: its layer follows the carrier's, in the tree and columns.
        local queue = PDU_CONTEXT.carried
        queue[#queue + 1] = { inner, tvb(pos, len):tvb() }
        return true
      end
    end
  end
  return false
end

-- Words separated by spaces or tabs, named in order by a struct; a shorter line leaves out
-- optional members, taken in order when words spare.
local function read_words(spec, tvb, pos, size, tree, ctx, name, out)
  local text = size > 0 and tvb:raw(pos, size) or ""
  local spans = {}
  for s, e in text:gmatch("()[^ \t\r\n]+()") do spans[#spans + 1] = { s, e } end
  local members = SPEC.structs[spec.struct]
  local required = 0
  local shown = {}
  for _, m in ipairs(members) do
    if not m.optional then required = required + 1 end
    shown[#shown + 1] = m.optional and ("[" .. m.name .. "]") or m.name
  end
  if #spans < required then
    bad(name, pos, string.format("%s: %d words where %s are expected", name, #spans, table.concat(shown, " ")))
  end
  local holder = tree and tree:add(tvb(pos, size), struct_title(name)) or nil
  local spare = #spans - required
  local value = {}
  local i = 0
  for _, m in ipairs(members) do
    local take = true
    if m.optional then
      if spare <= 0 then take = false else spare = spare - 1 end
    end
    if take then
      i = i + 1
      local s, e = spans[i][1], spans[i][2]
      local at = pos + s - 1
      local word = text:sub(s, e - 1)
      if not utf8_valid(word) then
        note(ctx, "warn", "malformed", m.name .. " is not valid UTF-8")
        word = py_utf8(word)
      end
      if m.width then
        if not word:match("^[0-9]+$") then bad(m.name, at, string.format("%s '%s' is not a number", m.name, word)) end
        if tonumber(word) >= 2 ^ (8 * m.width) then
          bad(m.name, at, string.format("%s '%s' is out of range for %s", m.name, word, m.type))
        end
        value[m.name] = tonumber(word)
        if holder then holder:add(F[m.name], tvb(at, e - s), value[m.name]) end
      else
        value[m.name] = word
        if holder then holder:add(F[m.name], tvb(at, e - s), word) end
      end
      -- an inline line's words are the frame's as they come: a bad word later keeps them
      if spec.inline then out[m.name] = value[m.name] end
    end
  end
  if i < #spans then
    note(ctx, "warn", "malformed", string.format("%s: %d words more than expected", name, #spans - i))
  end
  return value
end

local function run_hook(hook, ctx, fn)
  local ok, err = pcall(fn)
  if not ok then
    if type(err) == "table" then error(err, 0) end
    note(ctx, "error", "malformed", "hook " .. hook .. " failed: " .. tostring(err))
  end
end

-- JSON text at [pos, pos + len): a declared struct's members, or any JSON value.
local function read_json(spec, tvb, pos, len, tree, ctx, name, holder_text)
  local range = tvb(pos, len)
  local text = len > 0 and tvb:raw(pos, len) or ""
  if not utf8_valid(text) then
    note(ctx, "warn", "malformed", name .. " is not valid UTF-8")
    text = py_utf8(text)
  end
  if not text:find("%S") then return nil end
  local ok, value, lenient = pcall(json_parse, text)
  if not ok then
    if type(value) == "table" and value.json then
      -- Python's json names the character offset; it is the byte offset for ASCII text.
      note(ctx, "warn", "malformed", string.format("%s is not JSON: %s at byte %d", name, value.text, value.pos))
      if tree then tree:add(F[name] or F.payload, range) end
      return { pos = pos, len = len, tvb = tvb }
    end
    error(value, 0)
  end
  if lenient then
    note(ctx, "note", "malformed", name .. ": JSON with unquoted object keys (read as its writers' parsers do)")
  end
  if value == JSON_NULL and not spec.struct then
    -- JSON's null says nothing, as Python's None: a text item, not a value of the field
    if tree then tree:add(range, struct_title(name) .. ": null") end
    return nil
  end
  if spec.struct then
    if getmetatable(value) ~= JSON_OBJECT then
      note(ctx, "warn", "malformed", name .. ": expected a JSON object")
    else
      local notes = {}
      value = keyed_fields(SPEC.structs[spec.struct], value, notes)
      for _, n in ipairs(notes) do note(ctx, "warn", "malformed", name .. ": " .. n) end
    end
    if tree and type(value) == "table" and value.__order then
      local holder
      if holder_text then holder = tree:add(range, holder_text) else holder = tree:add(F[name], range) end
      for _, member in ipairs(SPEC.structs[spec.struct]) do
        local shown = value[member.name]
        local skip = ctx.entries_field == member.name and ctx.taken_entries or nil
        if skip and getmetatable(shown) == JSON_OBJECT then
          -- The header's entries that the layout names show as its fields, not here.
          local left = setmetatable({ keys = {}, map = {} }, JSON_OBJECT)
          for _, k in ipairs(shown.keys) do
            if not skip[k] then left.keys[#left.keys + 1] = k left.map[k] = shown.map[k] end
          end
          shown = #left.keys > 0 and left or nil
        end
        if shown ~= nil then show_keyed(holder, member, shown, range) end
      end
    end
    return value
  end
  if tree then
    local item = tree:add(F[name], range, text)
    json_tree(item, value, range, "JSON")
  end
  return value
end

-- What a field's value says beyond itself: a constant to match, parts of a packed word.
local function checks(spec, value, out, range, ctx)
  if spec.const ~= nil then
    local want = spec.const
    if type(want) == "number" and value ~= want then
      note(ctx, "error", "malformed", string.format("%s is 0x%x, expected 0x%x", struct_title(spec.name), value, want))
    end
  end
  if spec.bits and type(value) == "number" then
    for _, part in ipairs(spec.bits) do
      out[part.name] = masked(value, part.mask)
      if spec.__item and range then
        if LITTLE then spec.__item:add_le(F[part.name], range) else spec.__item:add(F[part.name], range) end
      end
    end
  end
  spec.__item = nil
end

local function present(spec, out, pos, stop, version)
  if (spec.since or 1) > version then return false end
  if spec.when then
    local value = out[spec.when.field]
    if spec.when.mask and type(value) == "number" then value = band(value, spec.when.mask) end
    if not contains(spec.when.values, value) then return false end
  end
  if spec.optional and pos >= stop then return false end
  return true
end

local function store(spec, out, value)
  if spec.inline and type(value) == "table" and value.__order then
    for _, name in ipairs(value.__order) do out[name] = value[name] end
  elseif spec.inline and type(value) == "table" and value.pos == nil then
    for name, v in pairs(value) do out[name] = v end
  else
    out[spec.name] = value
  end
end

-- The case an earlier field's value picks, read within [pos, stop).
local function read_case(spec, version, tvb, pos, stop, tree, ctx, out)
  local selector = out[spec.on]
  local case = spec.cases[selector] or spec.default
  if case == nil then
    note(ctx, "warn", "malformed", string.format("%s: no layout for %s %s; %d bytes not decoded",
      spec.name, spec.on, tostring(selector), stop - pos))
    return { pos = pos, len = stop - pos, tvb = tvb }, stop
  end
  local label = struct_title(spec.name) .. " (" .. (case.type == "json" and "JSON" or struct_title(case.struct or case.type)) .. ")"
  if case.type == "json" then
    -- An inline case shows its members under a text item, as their values belong to the frame.
    local value = read_json(case, tvb, pos, stop - pos, tree, ctx, spec.name, label)
    return value, stop
  end
  local holder
  if tree then
    -- An inline case's members belong to the frame: a text item holds them; else the field's own.
    if spec.inline or F[spec.name] == nil then
      holder = tree:add(tvb(pos, stop - pos), label)
    else
      holder = tree:add(F[spec.name], tvb(pos, stop - pos))
      holder:set_text(label)
    end
  end
  local value = {}
  local after = decode_fields(SPEC.structs[case.struct], version, tvb, pos, stop, value, holder, ctx)
  if after < stop and spec.size ~= nil then
    note(ctx, "warn", "malformed", string.format("%s: %d bytes after its last field", spec.name, stop - after))
  end
  if holder and spec.size == nil then holder:set_len(after - pos) end
  return value, spec.size ~= nil and stop or after
end

-- A field that is an entry of the header's map (frame.entries): taken from it, converted.
local function read_entry_field(spec, ctx, out, tree)
  local entries = ctx.entries
  if entries == nil then return end
  local key = spec.entry
  local raw = entries.map[key]
  if raw == nil then return end
  local notes = {}
  local value = keyed_value(spec, raw, notes)
  for _, n in ipairs(notes) do note(ctx, "warn", "malformed", n) end
  ctx.taken[key] = true
  out[spec.name] = value
  if tree then show_keyed(tree, spec, value, ctx.entries_range) end
  local hook = spec.hook and HOOKS[spec.hook]
  if hook and hook.value then
    run_hook(spec.hook, ctx, function() hook.value(spec, value, tree, ctx, out) end)
  end
end

-- The fields of one layout or struct, in order, into out; returns the position after them.
decode_fields = function(specs, version, tvb, pos, stop, out, tree, ctx)
  -- Without a tree, a plain integer (nothing to check, split or hook) that the copy of the
  -- frame's first bytes holds is read from it here, without the walk below: a chunk header's
  -- dozen fields, a frame header's three. Anything else, or a value the copy cannot give (short,
  -- 2^46 or more), takes the walk, which explains it.
  local raw = tree == nil and ctx.raw_tvb == tvb and ctx.raw or nil
  local raw_end = raw and math.min(ctx.raw_n, stop)
  for i = 1, #specs do
    local spec = specs[i]
    local value = nil
    if raw then
      local plain = spec.__plain
      if plain == nil then
        plain = spec.width ~= nil and not (spec.entry or spec.when or spec.optional or spec.hook or spec.bits
          or spec.const ~= nil or spec.inline or spec.length_of or spec.secret)
        spec.__plain = plain
      end
      local width = spec.width
      if plain and pos + width <= raw_end and (spec.since or 1) <= version then
        value = LITE.int_at(raw, pos + 1, width, spec.type)
      end
    end
    if value ~= nil then
      out[spec.name] = value
      pos = pos + spec.width
    elseif spec.entry and ctx.entries_layout then
      if (spec.since or 1) <= version then read_entry_field(spec, ctx, out, tree) end
    elseif (spec.when == nil and not spec.optional and (spec.since or 1) <= version)
        or present(spec, out, pos, stop, version) then
      local t = spec.type
      if t == "raw" then
        value, pos = read_raw(spec, tvb, pos, stop, out, ctx)
        if type(spec.const) == "string" and value ~= nil then
          -- a raw constant is written as hex in SPEC
          local want = spec.const:gsub("..", function(h) return string.char(tonumber(h, 16)) end)
          local got = value.len > 0 and tvb:raw(value.pos, value.len) or ""
          if got ~= want then
            note(ctx, "error", "malformed", string.format("%s is 0x%s, expected 0x%s", struct_title(spec.name),
              Struct.tohex(got, true), Struct.tohex(want, true)))
          end
        end
        local hook = spec.hook and HOOKS[spec.hook]
        if value == nil then
          -- a null raw field says nothing
        elseif hook and hook.raw then
          out[spec.name] = value
          local at = value.pos
          run_hook(spec.hook, ctx, function() hook.raw(spec, tvb, at, value.len, tree, ctx, out) end)
        elseif tree then
          tree:add(F[spec.name], tvb(value.pos, value.len))
        end
      elseif t == "hook" then
        local hook = HOOKS[spec.hook]
        local at = pos
        value, pos = hook.read(spec, tvb, at, stop, tree, ctx, spec.name, out)
      elseif t == "protobuf" then
        local size, skip = sized(spec, tvb, pos, stop, out, ctx)
        value = read_protobuf(spec, tvb, pos, size, tree, ctx, spec.name)
        pos = pos + size + skip
      elseif t == "words" then
        local size, skip = sized(spec, tvb, pos, stop, out, ctx)
        value = read_words(spec, tvb, pos, size, tree, ctx, spec.name, out)
        pos = pos + size + skip
      elseif t == "string" and spec.size then
        local size, skip = sized(spec, tvb, pos, stop, out, ctx)
        local at = pos
        value = read_text(tvb, at, size, not spec.secret and tree or nil, ctx, spec.name, tvb(at, size))
        if spec.secret and value ~= "" then value = SPEC.masked end  -- a credential is never shown
        if spec.secret and tree then tree:add(F[spec.name], tvb(at, size), value) end
        local hook = spec.hook and HOOKS[spec.hook]
        if hook and hook.value and value ~= nil then
          run_hook(spec.hook, ctx, function() hook.value(spec, value, tree, ctx, out, tvb, at, size) end)
        end
        pos = pos + size + skip
      elseif t == "json" then
        local size, skip = sized(spec, tvb, pos, stop, out, ctx)
        if size ~= nil then
          value = read_json(spec, tvb, pos, size, tree, ctx, spec.name, spec.inline and struct_title(spec.name) or nil)
          local hook = spec.hook and HOOKS[spec.hook]
          if hook and hook.value and value ~= nil then
            local at, len = pos, size
            run_hook(spec.hook, ctx, function() hook.value(spec, value, tree, ctx, out, tvb, at, len) end)
          end
          pos = pos + size + skip
        end
      elseif t == "switch" then
        local size, skip = sized(spec, tvb, pos, stop, out, ctx)
        if size ~= nil then
          value, pos = read_case(spec, version, tvb, pos, pos + size, tree, ctx, out)
          if spec.size ~= nil then pos = pos + skip end
        end
      else
        local at = pos
        local hook = spec.hook and HOOKS[spec.hook]
        -- A hook that shows its field (masking a secret in it) adds the item itself.
        local shown = not (hook and hook.shows) and tree or nil
        value, pos = read_value(spec, version, tvb, pos, stop, shown, ctx, spec.name)
        -- (the range only for the items of its bits: a TvbRange per integer is not free)
        if spec.width then checks(spec, value, out, spec.bits and spec.__item and tvb(at, spec.width), ctx) end
        if hook and hook.value and value ~= nil then
          run_hook(spec.hook, ctx, function() hook.value(spec, value, tree, ctx, out, tvb, at, pos - at) end)
        end
      end
      store(spec, out, value)
    end
  end
  return pos
end

-- Info column ------------------------------------------------------------------------

local function short_value(spec, value, response)
  if value == nil then return "null" end
  local enum = (response and spec.response_enum) or spec.enum
  if enum then
    local name = VS[enum] and VS[enum][value]
    -- spelled as the tree and the expert texts spell it; quoted when it has spaces, as text is
    if name then return name:find(" ", 1, true) and ('"' .. name .. '"') or name end
    return tostring(value)
  end
  if spec.type == "string" then
    if type(value) ~= "string" then return tostring(java_text(value)) end  -- what a keyed object held
    if value ~= "" and not value:find(" ", 1, true) then return value end
    return '"' .. value:gsub("\\", "\\\\"):gsub('"', '\\"') .. '"'
  end
  if spec.display == "hex" then return string.format("0x%x", value) end
  if value == true then return "True" elseif value == false then return "False" end
  return tostring(value)
end

-- Of a list of specs, those that can add to Info (found once per list: most add nothing, and
-- every frame walked them all).
local INFO_SPECS = {}
local function info_specs(specs)
  local found = INFO_SPECS[specs]
  if found == nil then
    found = {}
    for _, spec in ipairs(specs) do
      if (spec.hook and SPEC.hook_info[spec.hook]) or (spec.inline and spec.struct and spec.type ~= "switch")
          or ((spec.type == "struct" or spec.type == "pairs" or spec.type == "json") and spec.struct) or spec.info then
        found[#found + 1] = spec
      end
    end
    INFO_SPECS[specs] = found
  end
  return found
end

local function info_parts(specs, values, parts, response)
  for _, spec in ipairs(info_specs(specs)) do
    local value = values[spec.name]
    if spec.hook and SPEC.hook_info[spec.hook] and value ~= nil then
      info_parts(SPEC.hook_info[spec.hook], values, parts, response)  -- what its hook adds beside it
    end
    if spec.inline and spec.struct and spec.type ~= "switch" then
      info_parts(SPEC.structs[spec.struct], values, parts, response)  -- its members are the layout's
    elseif (spec.type == "struct" or spec.type == "pairs" or spec.type == "json") and spec.struct and type(value) == "table" then
      info_parts(SPEC.structs[spec.struct], value, parts, response)
    elseif spec.info and value ~= nil then
      if spec.type == "array" or spec.type == "map" then
        local n = 0
        if getmetatable(value) == JSON_OBJECT then
          n = #value.keys
        elseif type(value) == "table" and value.projected then
          n = #value  -- structs read as their one integer (LITE.plan)
        elseif type(value) == "table" then
          -- A list's length, without a walk over its elements (a confirm's hundreds of ids): no
          -- key after its last element. Any other table is counted key by key.
          n = #value
          if next(value, n > 0 and n or nil) ~= nil then
            n = 0
            for _ in pairs(value) do n = n + 1 end
          end
        else
          n = tostring(java_text(value))  -- not a list: what came, as Python shows it
        end
        parts[#parts + 1] = spec.info .. "=" .. n
      else
        parts[#parts + 1] = spec.info .. "=" .. short_value(spec, value, response)
      end
    end
  end
end

-- Header fields whose values land in the frame's fields (inline members, bit parts too).
local HEADER_INFO = {}
-- The frame's own values (size, key, version) that the header names: not fields of the frame.
local FRAME_OWN = {}
do
  local HEADER_NAMES = {}
  local function walk(specs)
    for _, spec in ipairs(specs) do
      HEADER_NAMES[spec.name] = true
      if spec.info then HEADER_INFO[#HEADER_INFO + 1] = spec end
      for _, part in ipairs(spec.bits or {}) do
        HEADER_NAMES[part.name] = true
        if part.info then HEADER_INFO[#HEADER_INFO + 1] = part end
      end
      if spec.inline then
        local case = spec.type == "switch" and (spec.cases[next(spec.cases)] or spec.default) or spec
        if case and case.struct then walk(SPEC.structs[case.struct]) end
      end
    end
  end
  walk(SPEC.header)
  for _, name in ipairs({ "size", "key", "version" }) do
    if HEADER_NAMES[name] then FRAME_OWN[#FRAME_OWN + 1] = name end
  end
end

-- The header's part of the Info column: a request's key field is its command (shown
-- already), and empty header text says nothing.
local function header_info(fields, parts, response)
  for _, spec in ipairs(HEADER_INFO) do
    local value = fields[spec.name]
    if value ~= nil and value ~= "" and not (spec.name == SPEC.frame.key and not response) then
      parts[#parts + 1] = spec.info .. "=" .. short_value(spec, value, response)
    end
  end
end

-- One frame ---------------------------------------------------------------------------

local FRAME = SPEC.frame
-- A protocol its package frames (text lines) has no length field: the package's Lua twin
-- gives FRAMING.pdu_length, and a PDU's size is all of it.
local LENGTH = SPEC.length or { offset = 0, width = 0, counts = "whole" }
local HEADER_SIZE = fields_min(SPEC.header, 1)
local MASK_IN_KEY = FRAME.response and FRAME.response.field == FRAME.key
local KEY_HEX = false
for _, spec in ipairs(SPEC.header) do
  if spec.name == FRAME.key and spec.display == "hex" then KEY_HEX = spec.width * 2 end
end

local KEY_NAMES = FRAME.key_enum and VS[FRAME.key_enum] or nil
-- Keys are numbers unless the key field is text (an unknown name stays text: no key item then).
-- (SPEC.names: a row a field, { flat name, ftype, title, doc }, as proto.lua reads them)
local KEY_TYPE = "number"
for _, entry in ipairs(SPEC.names) do
  if entry[1] == "key" and entry[2] == "string" then KEY_TYPE = "string" end
end
local key_text
do
  -- a number key's text, made once per key (every frame's is kept for the tracker's findings)
  local texts = {}
  key_text = function(key)
    if key == nil then return "?" end
    local text = texts[key]
    if text then return text end
    if KEY_HEX and type(key) == "number" then
      text = hex(key, KEY_HEX)
    elseif KEY_NAMES and KEY_NAMES[key] then
      text = KEY_NAMES[key]
    else
      text = tostring(key)
    end
    if type(key) == "number" then texts[key] = text end
    return text
  end
end

-- The whole length of the frame that starts tvb at offset, from its length field.
local LENGTH_TYPE = ({ [1] = "uint8", [2] = "uint16", [4] = "uint32", [8] = "uint64" })[LENGTH.width]
local function frame_length(tvb, offset)
  if LENGTH.width == 0 then return int(tvb:reported_len()) - offset end
  local value = read_int(tvb(offset + LENGTH.offset, LENGTH.width), LENGTH_TYPE)
  if LENGTH.counts == "after" then return value + LENGTH.offset + LENGTH.width end
  return value
end

local function marked(fields, mark)
  if mark == nil then return false end
  local value = fields[mark.field]
  return type(value) == "number" and masked(value, mark.mask) ~= 0
end

-- Decodes the frame in tvb (header included) under tree; returns what the tracker and the
-- Info column need. Never raises for bad input: problems become notes. key: the command a
-- response's request named, for protocols whose responses carry a status in its place.
-- lite: no tree is kept, so hooks skip what only the tree shows (records, message bodies).
local function decode_frame(tvb, tree, lookup, lite)
  local ctx = { notes = {}, lite = lite }
  local frame = { fields = {}, notes = ctx.notes, kind = "unknown" }
  local avail = int(tvb:len())
  local partial = avail < int(tvb:reported_len())
  if avail < HEADER_SIZE then
    note(ctx, "error", "malformed", "frame too short for a header: " .. avail .. " bytes")
    return frame
  end
  local total = frame_length(tvb, 0)
  local size = total - (LENGTH.counts == "after" and (LENGTH.offset + LENGTH.width) or 0)
  if total > SPEC.max_size + (LENGTH.counts == "after" and (LENGTH.offset + LENGTH.width) or 0) or total < HEADER_SIZE then
    frame.unframed = true
    note(ctx, "warn", "malformed", string.format(
      "%d bytes that do not start a frame (the size field says %d): the capture may have lost bytes before them",
      int(tvb:reported_len()), size))
    if tree then tree:add(F.payload, tvb(0, avail)) end
    return frame
  end
  frame.size = size
  if partial then ctx.declared_end = total end
  local stop = avail
  if total < stop then
    note(ctx, "warn", "malformed", (stop - total) .. " bytes beyond the frame size " .. size)
    stop = total
  elseif total > stop and not partial then
    note(ctx, "error", "malformed",
      "frame size says " .. size .. " bytes but only " .. (stop - (total - size)) .. " present")
  end
  -- The header, once without items to learn the command (and which entries its layout
  -- names), then with them.
  -- The frame's first bytes, one copy, from which integers are read where no item is added.
  local raw = tvb:raw(0, math.min(stop, 1024))
  ctx.raw, ctx.raw_tvb, ctx.raw_n = raw, tvb, #raw
  local probe = {}
  local probe_ctx = { notes = {}, declared_end = ctx.declared_end, lite = lite, raw = raw, raw_tvb = tvb, raw_n = #raw }
  local ok, result = pcall(decode_fields, SPEC.header, 1, tvb, 0, stop, probe, nil, probe_ctx)
  if not ok then
    if type(result) == "table" and (result.short or result.bad) then
      local what = result.short and short_detail(result) or result.text
      note(ctx, "error", "malformed", "frame too short for a header: " .. what)
      -- The key field, when it came before what was short, still names the frame (as Python's).
      local wire_key = probe[FRAME.key]
      if type(wire_key) == "number" or type(wire_key) == "string" then
        frame.wire_key, frame.key, frame.key_text = wire_key, wire_key, key_text(wire_key)
        if tree and FRAME.key ~= "key" and (type(wire_key) == "number") == (KEY_TYPE == "number") then
          tree:add(F.key, tvb(0, 0), wire_key):set_generated()
        end
      end
      return frame
    end
    note(ctx, "error", "malformed", "internal error in the streamdump Lua plugin: " .. tostring(result))
    return frame
  end
  local wire_key = probe[FRAME.key]
  local version = probe.version or FRAME.default_version
  local response = marked(probe, FRAME.response)
  local oneway = not response and marked(probe, FRAME.oneway)
  if type(wire_key) ~= "number" and type(wire_key) ~= "string" then wire_key = nil end
  local key = wire_key
  if FRAME.key_case == "any" and type(key) == "string" then key = key:upper() end
  if type(wire_key) ~= KEY_TYPE then key = nil end  -- text where the key is a number: an unknown name
  if MASK_IN_KEY and type(wire_key) == "number" then
    response = has_bit(wire_key, FRAME.response.mask)
    if response then key = wire_key - FRAME.response.mask end
  elseif wire_key ~= nil and SPEC.answers[wire_key] ~= nil then
    -- a response with a key of its own (HELLO_RESPONSE answers HELLO_REQUEST)
    response, oneway, key = true, false, SPEC.answers[wire_key]
  end
  if FRAME.response_key == "request" and lookup then
    local corr = probe[SPEC.conversation.correlation]
    if response then key = lookup("response", corr) elseif not oneway then lookup("request", corr, key) end
  end
  frame.wire_key, frame.key, frame.version, frame.response = wire_key, key, version, response
  local command = key ~= nil and SPEC.commands[key] or nil
  local layouts = key ~= nil and SPEC.layouts[key] or nil
  local layout = nil
  if layouts then
    if response then layout = layouts.response else layout = layouts.request or layouts.command end
  end
  frame.command = command and command.name or nil
  frame.key_text = (key == nil and type(wire_key) == "string") and wire_key or key_text(key)
  if tree and FRAME.key ~= "key" and key ~= nil and (type(key) == "number") == (KEY_TYPE == "number") then
    tree:add(F.key, tvb(0, 0), key):set_generated()
  end
  if FRAME.entries and layout then
    local taken = {}
    for _, spec in ipairs(layout.fields) do if spec.entry then taken[spec.entry] = true end end
    local map = probe[FRAME.entries]
    if map then
      -- Only entries the layout leaves: the named ones show as the layout's fields.
      for _, k in ipairs(map.keys) do if not taken[k] then taken.__any = true end end
    end
    ctx.taken_entries, ctx.entries_field = taken, FRAME.entries
  end
  local pos
  if lite then
    -- No items to add: the probe's reading is the header's (its notes and state carried over).
    -- (the probe's context is the frame's from here, with ctx's notes and the entries' state
    -- worked out above: the rest of ctx it holds already)
    frame.fields, pos = probe, result
    for _, n in ipairs(probe_ctx.notes) do ctx.notes[#ctx.notes + 1] = n end
    probe_ctx.notes = ctx.notes
    probe_ctx.taken_entries, probe_ctx.entries_field = ctx.taken_entries, ctx.entries_field
    ctx = probe_ctx
  else
    pos = decode_fields(SPEC.header, 1, tvb, 0, stop, frame.fields, tree, ctx)
  end
  for _, name in ipairs(FRAME_OWN) do frame.fields[name] = nil end
  if layout == nil then
    frame.kind = response and "response" or (oneway and command and "command") or "unknown"
    if key == nil and response then
      note(ctx, "note", "malformed", "its command is its request's, which the capture does not show; body not decoded")
    elseif command == nil then
      note(ctx, "warn", "malformed", "unknown command key " .. frame.key_text)
    else
      note(ctx, "warn", "malformed",
        command.name .. " has no " .. frame.kind .. " layout (key " .. key_text(wire_key) .. ")")
    end
    if pos < stop then
      frame.fields.payload = true
      if tree then tree:add(F.payload, tvb(pos, stop - pos)) end
    end
    local parts = {}
    header_info(frame.fields, parts, response)
    frame.info = table.concat(parts, " ")
    return frame
  end
  frame.kind = (oneway and layout.kind == "request") and "command" or layout.kind
  local layout_version = version
  if not FRAME.layout_versions then
    layout_version = command.versions[1]
  elseif not contains(command.versions, version) then
    layout_version = nil
    for _, v in ipairs(command.versions) do
      if v <= version and (layout_version == nil or v > layout_version) then layout_version = v end
    end
    layout_version = layout_version or command.versions[1]
    local known = {}
    for _, v in ipairs(command.versions) do known[#known + 1] = tostring(v) end
    note(ctx, "warn", "malformed", string.format(
      "%s version %d is not in the registry (known: %s); decoded as version %d",
      command.name, version, table.concat(known, ", "), layout_version))
  end
  if FRAME.entries then
    local map = frame.fields[FRAME.entries]
    ctx.entries = map or setmetatable({ keys = {}, map = {} }, JSON_OBJECT)
    ctx.entries_range = tvb(LENGTH.offset + LENGTH.width, math.max(0, pos - LENGTH.offset - LENGTH.width))
    ctx.entries_layout = true
    ctx.taken = {}
  end
  ok, result = pcall(decode_fields, layout.fields, layout_version, tvb, pos, stop, frame.fields, tree, ctx)
  ctx.entries_layout = nil
  if ok then
    pos = result
  elseif type(result) == "table" and result.short then
    note(ctx, "error", "malformed", short_message(result))
    pos = stop
  elseif type(result) == "table" and result.bad then
    note(ctx, "error", "malformed", result.text)
    pos = stop
  else
    note(ctx, "error", "malformed", "internal error in the streamdump Lua plugin: " .. tostring(result))
    pos = stop
  end
  if FRAME.entries and ctx.taken then
    local map = frame.fields[FRAME.entries]
    if map then
      local left = setmetatable({ keys = {}, map = {} }, JSON_OBJECT)
      for _, k in ipairs(map.keys) do
        if not ctx.taken[k] then left.keys[#left.keys + 1] = k left.map[k] = map.map[k] end
      end
      frame.fields[FRAME.entries] = #left.keys > 0 and left or nil
    end
  end
  if pos < stop then
    frame.fields.trailing = true
    if tree then tree:add(F.trailing, tvb(pos, stop - pos)) end
    note(ctx, "warn", "malformed", (stop - pos) .. " bytes after the last field")
  end
  local parts = {}
  header_info(frame.fields, parts, response)
  info_parts(layout.fields, frame.fields, parts, response)
  frame.info = table.concat(parts, " ")
  return frame
end

-- The conversation tracker: links and findings, from SPEC.conversation ---------------------
-- The engine: pairing by correlation id, status codes, sessions and the server's closes. What
-- only one protocol does is a rule of its package; the rule's Lua twin, in the package's Lua
-- files below, sets CONV_RULES[key] = { before, feed, status, explain, session_ended }, each
-- optional, called in the order of SPEC.conversation.rule_order (the package's).

local CONV = SPEC.conversation
local SESSION_OF = {}   -- command -> list of {session name, role}
for name, session in pairs(CONV.sessions) do
  local function add(command, role)
    SESSION_OF[command] = SESSION_OF[command] or {}
    table.insert(SESSION_OF[command], { name = name, role = role })
  end
  add(session.open, "open")
  if session.close then add(session.close, "close") end
  for _, user in ipairs(session.used_by) do add(user, "use") end
end
-- Per command key and direction ("key/r" for responses): the status field's enum, and the
-- request strings worth naming in findings.
local STATUS_ENUM, NAMED = {}, {}
local ANY_STATUS = nil  -- a status in the header names its codes for every response
local HEADER_STATUS = nil  -- ... and every known command's, with its plain enum too
do
  local function walk(specs)
    for _, spec in ipairs(specs) do
      if spec.name == CONV.status then
        if spec.response_enum then ANY_STATUS = VS[spec.response_enum] end
        HEADER_STATUS = VS[spec.response_enum or spec.enum]
      end
      if spec.inline and spec.type == "switch" then
        for _, case in pairs(spec.cases) do if case.struct then walk(SPEC.structs[case.struct]) end end
      elseif spec.inline and spec.struct then
        walk(SPEC.structs[spec.struct])
      end
    end
  end
  walk(SPEC.header)
end
local CLOSE_REASONS = {}
for _, close in pairs(CONV.closes) do
  for _, name in ipairs(close.reason) do CLOSE_REASONS[name] = true end
end
local function layout_id(key, response) return tostring(key) .. (response and "/r" or "") end
for key, kinds in pairs(SPEC.layouts) do
  for kind, layout in pairs(kinds) do
    local id = layout_id(key, kind == "response")
    STATUS_ENUM[id] = HEADER_STATUS
    NAMED[id] = {}
    local function named_in(specs)
      for _, spec in ipairs(specs) do
        local enum = spec.response_enum or spec.enum
        if spec.name == CONV.status and enum then STATUS_ENUM[id] = VS[enum] end
        if spec.type == "string" and spec.info and not CLOSE_REASONS[spec.name] then
          table.insert(NAMED[id], spec.name)
        end
        if spec.inline and spec.struct then named_in(SPEC.structs[spec.struct]) end
      end
    end
    named_in(layout.fields)
  end
end

local function set_of(list)
  local out = {}
  for _, v in ipairs(list) do out[v] = true end
  return out
end
local OK, ROUTINE, SETUP = set_of(CONV.ok), set_of(CONV.routine), set_of(CONV.setup)

local function named(enum, code)
  local text = CONV.codes == "dec" and tostring(code) or string.format("0x%02x", code)
  local name = enum and enum[code]
  if name then return name .. " (" .. text .. ")" end
  return "code " .. text
end

-- What the server is called: by its port's role (a name server), else the spec's word.
local function server_of(conn)
  return (conn.server_port and SPEC.roles[conn.server_port]) or CONV.server
end

local function is_number(v) return type(v) == "number" end
-- What findings call the correlation field ("correlation id", "opaque").
local CORR_NAME = (CONV.correlation or "correlation id"):gsub("_", " ")

-- Every value a path names, stepping through arrays and structs.
local function path_values(fields, path, index, out)
  index, out = index or 1, out or {}
  local value = fields[path[index]]
  local projected = type(value) == "table" and value.projected
  if projected then
    -- structs read as their one integer (LITE.plan): that member's values, nothing else
    if index + 1 == #path and path[#path] == projected then
      for _, item in ipairs(value) do out[#out + 1] = item end
    end
  elseif type(value) == "table" and value.pos == nil and #value > 0 then
    -- a member of each element, the commonest path (messages.publishing_id), taken directly
    local leaf = index + 1 == #path and path[#path] or nil
    for _, item in ipairs(value) do
      if index == #path then
        if type(item) ~= "table" or getmetatable(item) ~= nil then out[#out + 1] = item end
      elseif type(item) == "table" then
        local v = leaf and item[leaf]
        if leaf == nil or (type(v) == "table" and v.pos == nil and #v > 0) then
          path_values(item, path, index + 1, out)
        elseif v ~= nil and (type(v) ~= "table" or getmetatable(v) ~= nil) then
          out[#out + 1] = v
        end
      end
    end
  elseif index == #path then
    if value ~= nil and (type(value) ~= "table" or getmetatable(value) ~= nil) then out[#out + 1] = value end
  elseif type(value) == "table" then
    path_values(value, path, index + 1, out)
  end
  return out
end

-- A frame's links to write to: its own table, made where it has none or shares its session's
-- (links.shared), and put in its slot for later passes where it has one (register.lua's settled).
local function links_of(f)
  local links = f.links
  if links == nil or links.shared then
    local own = {}
    for name, value in pairs(links or own) do own[name] = value end
    own.shared, f.links, links = nil, own, own
    if f.settled_in then f.settled_in[f.settled_at] = own end
  end
  return links
end

-- kind: the conversation rule's kind of finding, as the Python tracker files it.
local function tnote(f, severity, kind, message)
  f.tnotes = f.tnotes or {}
  f.tnotes[#f.tnotes + 1] = { severity = severity, kind = kind, message = message }
end

local function new_conn()
  return {
    pending = {}, sessions = {}, client_last = nil, suspects = {}, requests = {}, server_port = nil,
    ended = {}, setup_seen = false, rules = {},
  }
end

local function side_key(b) return b and "c" or "s" end

local function asked(request, response)
  if request == nil then
    return string.format("%s (response at packet %d)", response.command, response.number)
  end
  local about = {}
  for _, name in ipairs(NAMED[layout_id(request.key, false)] or {}) do
    local v = request.fields[name]
    if type(v) == "string" then about[#about + 1] = name:gsub("_", " ") .. " " .. quoted(v) end
  end
  local detail = #about > 0 and (" for " .. table.concat(about, ", ")) or ""
  return string.format("%s%s (packet %d)", request.command, detail, request.number)
end

local function session_name(kind, sid, session)
  local stream = session and session.values.stream
  if stream and stream ~= "" then return kind .. " " .. sid .. " (stream " .. quoted(stream) .. ")" end
  return kind .. " " .. sid
end

-- A response and its request, linked both ways with the time between.
local function pair(request, response)
  local links = links_of(response)
  links.request_in = request.number
  if response.ts >= request.ts then links.response_time = round6(response.ts - request.ts) end
  links_of(request).response_in = response.number
end

-- The package's rule twins, in the package's order, once every file has set its own.
local ORDERED_RULES = nil
local function rules()
  if ORDERED_RULES == nil then
    ORDERED_RULES = {}
    for _, key in ipairs(CONV.rule_order) do
      if CONV_RULES[key] then ORDERED_RULES[#ORDERED_RULES + 1] = CONV_RULES[key] end
    end
    -- the rules' before and feed functions, in order: what track calls for every frame
    ORDERED_RULES.before, ORDERED_RULES.feed = {}, {}
    for _, rule in ipairs(ORDERED_RULES) do
      if rule.before then table.insert(ORDERED_RULES.before, rule.before) end
      if rule.feed then table.insert(ORDERED_RULES.feed, rule.feed) end
    end
  end
  return ORDERED_RULES
end

local function status(conn, f, request)
  if CONV.status == nil then return end
  local code = f.fields[CONV.status]
  if not is_number(code) or OK[code] then return end
  local what = named(STATUS_ENUM[layout_id(f.key, f.kind == "response")] or ANY_STATUS, code)
  for _, rule in ipairs(rules()) do
    if rule.status and rule.status(conn, f, request, code, what) then return end
  end
  if ROUTINE[code] then
    tnote(f, "note", "routine_response", asked(request, f) .. " answered " .. what .. " (a routine answer)")
    return
  end
  local severity = SETUP[f.command] and "error" or "warn"
  local said = CONV.status_text and f.fields[CONV.status_text]
  said = (type(said) == "string" and said:find("%S")) and (" " .. quoted(said:match("^%s*(.-)%s*$"))) or ""
  local more = ""
  for _, rule in ipairs(rules()) do
    if rule.explain then more = more .. rule.explain(conn, f, request, code) end
  end
  tnote(f, severity, SETUP[f.command] and "setup_refused" or "error_response",
    asked(request, f) .. " failed: " .. what .. said .. more)
end

local function corr_text(corr)
  return type(corr) == "number" and string.format("%d", corr) or corr
end

local function correlate(conn, f)
  local corr = f.fields[CONV.correlation]
  if not is_number(corr) and (type(corr) ~= "string" or corr == "") then
    if f.kind == "response" then status(conn, f, nil) end
    return
  end
  local asker = f.from_client
  if f.kind ~= "request" then asker = not f.from_client end
  local key = side_key(asker) .. corr
  if f.kind == "request" then
    local earlier = conn.pending[key]
    if earlier then
      tnote(f, "warn", "duplicate_correlation", string.format(
        "%s request reuses " .. CORR_NAME .. " %s while the %s request of packet %d is still unanswered",
        f.command, corr_text(corr), earlier.command, earlier.number))
    end
    conn.pending[key] = f
    f.pending = true
    return
  end
  if f.kind ~= "response" then return end
  local request = conn.pending[key]
  if request and request.command ~= f.command then
    tnote(f, "warn", "mismatched_response", string.format(
      "%s response with " .. CORR_NAME .. " %s answers a %s request (packet %d)",
      f.command, corr_text(corr), request.command, request.number))
    request = nil
  end
  if request == nil then
    status(conn, f, nil)
    return
  end
  conn.pending[key] = nil
  pair(request, f)
  status(conn, f, request)
  request.pending = nil
  request.fields = nil  -- answered: only its number and links stay
end

-- The server's close: its code and reason, and the client's frame it is about.
local function closing(conn, f)
  local close = f.command and CONV.closes[f.command]
  if not close or f.kind == "response" or f.from_client then return end
  local fields = f.fields
  local code = close.code and fields[close.code]
  if close.code ~= nil and not is_number(code) then return end
  local what = code and (": " .. named(VS[close.enum] or {}, code)) or ""
  local parts = {}
  for _, name in ipairs(close.reason) do
    local v = fields[name]
    if v ~= nil and v ~= "" then parts[#parts + 1] = tostring(v) end
  end
  local reason = table.concat(parts, ":")
  local said = reason ~= "" and (" " .. quoted(reason)) or ""
  -- Twin of Tracker._closing: the client's frame the code is about, else its last one.
  local function named_frame(g)
    local version = CONV.versioned and string.format(", version %d", g.version) or ""
    return string.format("%s (key %s%s, %d bytes, packet %d)",
      g.command or string.format("Unknown(%s)", g.key_text or key_text(g.key)), key_text(g.wire_key),
      version, g.length, g.number)
  end
  local latest = conn.client_last
  local about = code and CONV.close_about[code]
  local suspect = about and conn.suspects[about]
  local hint = code and CONV.close_hints[code]
  local last = ""
  if suspect and latest and suspect.number ~= latest.number then
    last = "; the client's frame it is about was " .. named_frame(suspect)
      .. string.format(", before its last (packet %d)", latest.number)
  elseif suspect or latest then
    last = "; the client's last frame before it was " .. named_frame(suspect or latest)
  end
  if last ~= "" and hint then last = last .. ": " .. hint end
  tnote(f, code == nil and close.severity or OK[code] and "note" or "error", "server_close",
    "the " .. server_of(conn) .. " " .. close.says .. what .. said .. last)
end

-- A value kept for a frame's links (links.kept: { name, value } pairs). A session's values are
-- one list, made when it opens and shared by every frame that uses it (a list and a pair a frame
-- were two or three tables more, each kept for later passes and marked by every cycle of the
-- collector); a shared list (shared = true) is copied before a frame's own value is added.
local function keep_link(links, name, value)
  local kept = links.kept
  if kept == nil then
    kept = {}; links.kept = kept
  elseif kept.shared then
    local own = {}
    for i, pair in ipairs(kept) do own[i] = pair end
    kept = own
    links.kept = own
  end
  kept[#kept + 1] = { name, value }
end

-- A session's key in a connection's tables ("publisher:1"): made once per name and id, not
-- written out again for every frame that uses it.
local session_key
do
  local keys = {}
  session_key = function(name, sid)
    local by_id = keys[name]
    if by_id == nil then by_id = {}; keys[name] = by_id end
    local key = by_id[sid]
    if key == nil then key = name .. ":" .. tostring(sid); by_id[sid] = key end
    return key
  end
end

local function sessions(conn, f)
  for _, role in ipairs(SESSION_OF[f.command] or {}) do
    local spec = CONV.sessions[role.name]
    local sid = f.fields[spec.id]
    if is_number(sid) or type(sid) == "string" then
      local key = session_key(role.name, sid)
      if (role.role == "open" or role.role == "close") and f.kind == "request" and is_number(sid) then
        for _, rule in ipairs(rules()) do
          if rule.session_ended then rule.session_ended(conn, role.name, sid) end
        end
      end
      if role.role == "open" and f.kind ~= "response" then
        local values, kept = {}, { shared = true }
        for i, name in ipairs(spec.keep) do values[spec.keep_as[i]] = f.fields[name] end
        for _, name in ipairs(spec.keep_as) do
          if values[name] ~= nil then kept[#kept + 1] = { name, values[name] } end
        end
        conn.sessions[key] = { opened_in = f.number, values = values, kept = kept, uses = 0 }
        conn.ended[key] = nil
      elseif role.role == "close" and f.kind ~= "response" then
        local session = conn.sessions[key]
        local after = spec.close_after and f.fields[spec.close_after]
        if session and is_number(after) and session.uses < after then
          session.limit = after  -- it ends after that many uses in all
        else
          conn.sessions[key] = nil
          conn.ended[key] = f.number
        end
      elseif role.role == "use" then
        local session = conn.sessions[key]
        if session then
          if f.links == nil then
            -- The session's links, one table for the frames that use it (links_of copies it for one
            -- that gets a link of its own): each table is kept for later passes, marked every cycle.
            session.links = session.links or { opened_in = session.opened_in, kept = session.kept, shared = true }
            f.links = session.links
          else
            local links = links_of(f)
            links.opened_in = session.opened_in
            if links.kept == nil then
              links.kept = session.kept
            else
              for _, pair in ipairs(session.kept) do keep_link(links, pair[1], pair[2]) end
            end
          end
          session.uses = session.uses + 1
          if session.limit and session.uses >= session.limit then
            conn.sessions[key] = nil
            conn.ended[key] = f.number
          end
        elseif spec.unknown and conn.setup_seen then
          local name = f.command
          if conn.ended[key] then
            tnote(f, "note", "ended_session", string.format("%s for %s %s %s after packet %d ended it (sent before the %s read the %s)",
              name, role.name, spec.id, tostring(sid), conn.ended[key], server_of(conn), spec.close))
          else
            tnote(f, "warn", "unknown_session", string.format("%s for %s %s %s, which no %s in the capture opened",
              name, role.name, spec.id, tostring(sid), spec.open))
          end
        end
      end
    end
  end
end

local function track(conn, f)
  local ordered = rules()
  for _, before in ipairs(ordered.before) do before(conn, f) end
  if SETUP[f.command] then conn.setup_seen = true end
  -- A response whose command is its request's is tracked even when the request is missing.
  local orphan = f.kind == "response" and SPEC.frame.response_key == "request"
  if (f.command or orphan) and f.kind ~= "unknown" then
    if CONV.correlation then correlate(conn, f) end
    closing(conn, f)
    if SESSION_OF[f.command] then sessions(conn, f) end
    for _, feed in ipairs(ordered.feed) do feed(conn, f) end
  end
  if f.from_client then
    conn.client_last = f
    -- A command, or a version of it, the registry does not know: what an "unknown frame" close is about.
    local command = f.key ~= nil and SPEC.commands[f.key] or nil
    if (f.command == nil and f.kind ~= "response")
      or (command and CONV.versioned and not contains(command.versions, f.version)) then
      conn.suspects.unknown = f
    end
  end
end
