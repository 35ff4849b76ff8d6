-- The interpreter of SPEC: fields, layouts, expert info and the conversation tracker.
-- This text is copied into every generated plugin after its SPEC table; it is the Lua
-- counterpart of streamdump/layout.py, decoder.py and conversation.py. Lua 5.2 to 5.4:
-- no integer division operator, no bit operators, no bit32; arithmetic only.

local P = Proto(SPEC.name, SPEC.title)
local F = {}            -- flat name -> ProtoField
local E = {}            -- group -> severity -> ProtoExpert
local HOOKS = {}        -- hook name -> Lua twin (filled in by the hook files below)
local CONV_HOOKS = {}   -- the protocol package's conversation hooks (user: who authenticates)
local NAME_TITLE = {}   -- flat name -> display title
local VS = {}           -- enum name -> value string table

for name, values in pairs(SPEC.enums) do VS[name] = values end
VS.commands = {}
for key, command in pairs(SPEC.commands) do VS.commands[key] = command.name end

-- Field creation ---------------------------------------------------------------------

local FRAMETYPES = {}
if frametype ~= nil then
  FRAMETYPES.request_packet = frametype.REQUEST
  FRAMETYPES.response_packet = frametype.RESPONSE
end

local INT_FIELDS = {
  uint8 = ProtoField.uint8, uint16 = ProtoField.uint16, uint32 = ProtoField.uint32,
  uint64 = ProtoField.uint64, int8 = ProtoField.int8, int16 = ProtoField.int16,
  int32 = ProtoField.int32, int64 = ProtoField.int64,
}

local function make_field(entry)
  local abbr = SPEC.name .. "." .. entry.name
  local t, label, doc = entry.ftype, entry.title, entry.doc
  if t == "none" then return ProtoField.none(abbr, label, doc) end
  if t == "string" then return ProtoField.string(abbr, label, base.UNICODE, doc) end
  if t == "bytes" then return ProtoField.bytes(abbr, label, base.NONE, doc) end
  if t == "bool" then return ProtoField.bool(abbr, label, base.NONE, nil, nil, doc) end
  if t == "double" then return ProtoField.double(abbr, label, doc) end
  local display = entry.display
  if display == "packet" or display == "request_packet" or display == "response_packet" then
    return ProtoField.framenum(abbr, label, base.NONE, FRAMETYPES[display], nil, doc)
  end
  local vs = entry.enum and VS[entry.enum] or nil
  local b = base.DEC
  if display == "hex" and t:sub(1, 1) == "u" then b = base.HEX end
  return INT_FIELDS[t](abbr, label, b, vs, nil, doc)
end

local all_fields = {}
for _, entry in ipairs(SPEC.names) do
  F[entry.name] = make_field(entry)
  NAME_TITLE[entry.name] = entry.title
  all_fields[#all_fields + 1] = F[entry.name]
end
P.fields = all_fields

local GROUPS = {
  malformed = expert.group.MALFORMED, response_code = expert.group.RESPONSE_CODE,
  sequence = expert.group.SEQUENCE, protocol = expert.group.PROTOCOL,
  undecoded = expert.group.UNDECODED,
}
local SEVERITIES = {
  chat = expert.severity.CHAT, note = expert.severity.NOTE,
  warn = expert.severity.WARN, error = expert.severity.ERROR,
}
local all_experts = {}
for group, gvalue in pairs(GROUPS) do
  E[group] = {}
  for severity, svalue in pairs(SEVERITIES) do
    local e = ProtoExpert.new(SPEC.name .. ".expert." .. group .. "." .. severity,
      SPEC.title .. " " .. group:gsub("_", " ") .. " " .. severity, gvalue, svalue)
    E[group][severity] = e
    all_experts[#all_experts + 1] = e
  end
end
P.experts = all_experts

-- Small helpers ----------------------------------------------------------------------

-- Under Lua 5.4 a number Wireshark hands over may be a float (3.0), which prints as "3.0":
-- counts, sizes and packet numbers become integers where the Lua has integers.
local int = function(x) return x end
if math.tointeger then
  int = function(x) return math.tointeger(x) or x end
end
local function uint_of(range) return int(range:uint()) end
local function int_of(range) return int(range:int()) end

local function struct_title(name)
  local words = {}
  for word in name:gmatch("[^_]+") do
    local acronym = ({ id = "ID", ids = "IDs", crc = "CRC", sasl = "SASL" })[word]
    words[#words + 1] = acronym or (word:sub(1, 1):upper() .. word:sub(2))
  end
  return table.concat(words, " ")
end

local function hex(value, width)
  return string.format("0x%0" .. width .. "x", value)
end

local function quoted(text)
  -- Python's repr() of a string, which the Python side's messages use.
  if text:find("'", 1, true) and not text:find('"', 1, true) then return '"' .. text .. '"' end
  return "'" .. text:gsub("\\", "\\\\"):gsub("'", "\\'") .. "'"
end

local function contains(list, value)
  for _, v in ipairs(list) do if v == value then return true end end
  return false
end

local function round6(x)
  return tonumber(string.format("%.6f", x))
end

-- Strict UTF-8, as Python's decoder checks it.
local function utf8_valid(s)
  local i, n = 1, #s
  while i <= n do
    local c = s:byte(i)
    local extra, low
    if c < 0x80 then extra = 0
    elseif c >= 0xC2 and c <= 0xDF then extra, low = 1, 0x80
    elseif c >= 0xE0 and c <= 0xEF then extra, low = 2, 0x80
    elseif c >= 0xF0 and c <= 0xF4 then extra, low = 3, 0x80
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

local function short_message(err)
  return string.format("frame too short: %s needs %d bytes at offset %d, %d left",
    err.field, err.need, err.offset, math.max(err.have, 0))
end

local function note(ctx, severity, group, message)
  ctx.notes[#ctx.notes + 1] = { severity = severity, group = group, message = message }
end

-- Minimum sizes, as layout.py computes them, to refuse impossible counts before reading.
local min_size
local function fields_min(specs, version)
  local total = 0
  for _, spec in ipairs(specs) do
    if (spec.since or 1) <= version and not spec.when and not spec.optional then
      total = total + min_size(spec, version)
    end
  end
  return total
end

min_size = function(spec, version)
  local t = spec.type
  if spec.width then return spec.width end
  if t == "string" then return 2 end
  if t == "bytes" or t == "array" or t == "map" then return 4 end
  if t == "raw" then return type(spec.size) == "number" and spec.size or 0 end
  if t == "hook" then return HOOKS[spec.hook].min_size or 0 end
  if t == "struct" then return fields_min(SPEC.structs[spec.struct], version) end
  return 0
end

local READ = {
  uint8 = "uint", uint16 = "uint", uint32 = "uint", uint64 = "uint64",
  int8 = "int", int16 = "int", int32 = "int", int64 = "int64",
}

-- Field decoding ---------------------------------------------------------------------

local read_value, decode_fields

local function read_count(tvb, pos, stop, name, element_min, ctx)
  if stop - pos < 4 then short(name, pos, 4, stop - pos) end
  local count = int_of(tvb(pos, 4))
  pos = pos + 4
  if count == -1 then return nil, pos end
  if count < 0 then bad(name, pos - 4, name .. " has negative count " .. count) end
  local room = math.max(stop, ctx.declared_end or 0) - pos
  if count * element_min > room then
    short(name .. " (" .. count .. " entries)", pos, count * element_min, stop - pos)
  end
  return count, pos
end

local function add_null(tree, tvb, pos, width, name)
  if tree then tree:add(tvb(pos, width), (NAME_TITLE[name] or name) .. ": null") end
end

-- One value of a spec at pos; adds its items under tree (which may be nil).
read_value = function(spec, version, tvb, pos, stop, tree, ctx, name)
  local t = spec.type
  local width = spec.width
  if width then
    if stop - pos < width then short(name, pos, width, stop - pos) end
    local range = tvb(pos, width)
    local value = range[READ[t]](range)
    if width <= 4 then value = int(value) end
    if tree then
      local item = tree:add(F[name], range)
      if spec.display == "time_ms" then item:append_text(time_text(value)) end
    end
    return value, pos + width
  elseif t == "string" or t == "bytes" then
    local prefix = t == "string" and 2 or 4
    if stop - pos < prefix then short(name, pos, prefix, stop - pos) end
    local length = int_of(tvb(pos, prefix))
    if length == -1 then
      add_null(tree, tvb, pos, prefix, name)
      return nil, pos + prefix
    end
    if length < 0 then bad(name, pos, name .. " has negative length " .. length) end
    if stop - pos - prefix < length then short(name, pos + prefix, length, stop - pos - prefix) end
    if t == "bytes" then
      if tree then tree:add(F[name], tvb(pos + prefix, length)) end
      return { pos = pos + prefix, len = length, tvb = tvb }, pos + prefix + length
    end
    local text = length > 0 and tvb:raw(pos + 2, length) or ""
    if utf8_valid(text) then
      if tree then tree:add(F[name], tvb(pos, 2 + length), text) end
    else
      note(ctx, "warn", "malformed", name .. " is not valid UTF-8")
      text = tvb(pos + 2, length):string(ENC_UTF_8)
      -- Wireshark decodes it (replacing bad bytes) from the bytes themselves.
      if tree then tree:add_packet_field(F[name], tvb(pos + 2, length), ENC_UTF_8) end
    end
    return text, pos + 2 + length
  elseif t == "array" then
    local element = spec.of
    local count
    count, pos = read_count(tvb, pos, stop, name, min_size(element, version), ctx)
    if count == nil then
      add_null(tree, tvb, pos - 4, 4, name)
      return nil, pos
    end
    local holder
    if tree then
      holder = tree:add(tvb(pos - 4, 4), string.format("%s: %d", NAME_TITLE[name] or name, count))
    end
    local items, start = {}, pos - 4
    local ok, err = pcall(function()
      for index = 0, count - 1 do
        if element.type == "struct" then
          local child
          if holder then
            child = holder:add(F[name], tvb(pos, 0))
            child:set_text(string.format("%s [%d]", struct_title(element.struct), index))
          end
          local value = {}
          items[#items + 1] = value
          local at = pos
          local ok2, err2 = pcall(decode_fields, SPEC.structs[element.struct], version, tvb, pos, stop,
            value, child, ctx)
          if not ok2 then
            if child and type(err2) == "table" and err2.offset then child:set_len(math.max(0, math.min(err2.offset, stop) - at)) end
            error(err2, 0)
          end
          pos = err2
          if child then child:set_len(pos - at) end
        else
          local value
          value, pos = read_value(element, version, tvb, pos, stop, holder, ctx, name)
          items[#items + 1] = value
        end
      end
    end)
    if holder then holder:set_len(math.max(4, math.min(pos, stop) - start)) end
    if not ok then error(err, 0) end
    return items, pos
  elseif t == "map" then
    local count
    count, pos = read_count(tvb, pos, stop, name,
      min_size(spec.key, version) + min_size(spec.value, version), ctx)
    if count == nil then
      add_null(tree, tvb, pos - 4, 4, name)
      return nil, pos
    end
    local holder
    if tree then holder = tree:add(F[name], tvb(pos - 4, 4)):append_text(": " .. count .. " entries") end
    local items, start = {}, pos - 4
    local ok, err = pcall(function()
      for _ = 1, count do
        local at = pos
        local entry
        if holder then entry = holder:add(tvb(pos, 0), "") end
        local k, v
        k, pos = read_value(spec.key, version, tvb, pos, stop, entry, ctx, name .. ".key")
        v, pos = read_value(spec.value, version, tvb, pos, stop, entry, ctx, name .. ".value")
        if k == nil then k = "null" end
        if items[k] ~= nil then note(ctx, "warn", "malformed", name .. ": duplicate key " .. quoted(tostring(k))) end
        items[k] = v
        if entry then
          local shown = type(v) == "table" and "<bytes>" or tostring(v)
          entry:set_text(tostring(k) .. ": " .. shown)
          entry:set_len(pos - at)
        end
      end
    end)
    if holder then holder:set_len(math.max(4, math.min(pos, stop) - start)) end
    if not ok then error(err, 0) end
    return items, pos
  elseif t == "struct" then
    local child
    if tree then child = tree:add(F[name], tvb(pos, 0)) end
    local value = {}
    local at = pos
    local ok, err = pcall(decode_fields, SPEC.structs[spec.struct], version, tvb, pos, stop, value, child, ctx)
    if not ok then
      if child and type(err) == "table" and err.offset then child:set_len(math.max(0, math.min(err.offset, stop) - at)) end
      error(err, 0)
    end
    if child then child:set_len(err - at) end
    return value, err
  end
  error("no reader for type " .. tostring(t))
end

local function read_raw(spec, tvb, pos, stop, out)
  local size = spec.size
  if type(size) == "string" then size = out[size] end
  if size == nil then bad(spec.name, pos, spec.name .. ": size field " .. spec.size .. " is missing") end
  if size < 0 then return nil, pos end
  if stop - pos < size then short(spec.name, pos, size, stop - pos) end
  return { pos = pos, len = size, tvb = tvb }, pos + size
end

local function run_hook(hook, ctx, fn)
  local ok, err = pcall(fn)
  if not ok then
    if type(err) == "table" then error(err, 0) end
    note(ctx, "error", "malformed", "hook " .. hook .. " failed: " .. tostring(err))
  end
end

-- The fields of one layout or struct, in order, into out; returns the position after them.
decode_fields = function(specs, version, tvb, pos, stop, out, tree, ctx)
  for _, spec in ipairs(specs) do
    local present = (spec.since or 1) <= version
    if present and spec.when then present = contains(spec.when.values, out[spec.when.field]) end
    if present and spec.optional and pos >= stop then present = false end
    if present then
      local value
      if spec.type == "raw" then
        value, pos = read_raw(spec, tvb, pos, stop, out)
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
      elseif spec.type == "hook" then
        local hook = HOOKS[spec.hook]
        local at = pos
        value, pos = hook.read(spec, tvb, at, stop, tree, ctx, spec.name, out)
      else
        value, pos = read_value(spec, version, tvb, pos, stop, tree, ctx, spec.name)
      end
      out[spec.name] = value
    end
  end
  return pos
end

-- Info column ------------------------------------------------------------------------

local function short_value(spec, value)
  if value == nil then return "null" end
  if spec.enum then
    local name = VS[spec.enum][value]
    if name then return (name:gsub(" ", "_")) end
    return tostring(value)
  end
  if spec.type == "string" then
    if value ~= "" and not value:find(" ", 1, true) then return value end
    return '"' .. value:gsub("\\", "\\\\"):gsub('"', '\\"') .. '"'
  end
  if spec.display == "hex" then return string.format("0x%x", value) end
  return tostring(value)
end

local function info_parts(specs, values, parts)
  for _, spec in ipairs(specs) do
    local value = values[spec.name]
    if spec.type == "struct" and type(value) == "table" then
      info_parts(SPEC.structs[spec.struct], value, parts)
    elseif spec.info and value ~= nil then
      if spec.type == "array" or spec.type == "map" then
        local n = 0
        for _ in pairs(value) do n = n + 1 end
        parts[#parts + 1] = spec.info .. "=" .. n
      else
        parts[#parts + 1] = spec.info .. "=" .. short_value(spec, value)
      end
    end
  end
end

-- One frame ---------------------------------------------------------------------------

local SIZE_LEN = SPEC.size_len
local HEADER_SIZE = fields_min(SPEC.header, 1)
local RESPONSE_BIT = SPEC.response_bit

local function has_bit(value, bit)
  return math.floor(value / bit) % 2 == 1
end

-- Decodes the frame in tvb (size prefix included) under tree; returns what the tracker and
-- the Info column need. Never raises for bad input: problems become notes.
local function decode_frame(tvb, tree)
  local ctx = { notes = {} }
  local frame = { fields = {}, notes = ctx.notes, kind = "unknown" }
  local avail = int(tvb:len())
  local partial = avail < int(tvb:reported_len())
  if avail < SIZE_LEN + HEADER_SIZE then
    note(ctx, "error", "malformed", "frame too short for a header: " .. avail .. " bytes")
    return frame
  end
  local size = uint_of(tvb(0, SIZE_LEN))
  if size > SPEC.max_size or size < HEADER_SIZE then
    frame.unframed = true
    note(ctx, "warn", "malformed", string.format(
      "%d bytes that do not start a frame (the size field says %d): the capture may have lost bytes before them",
      int(tvb:reported_len()), size))
    if tree then tree:add(F.payload, tvb(0, avail)) end
    return frame
  end
  frame.size = size
  if partial then ctx.declared_end = SIZE_LEN + size end
  local stop = avail
  if size + SIZE_LEN < stop then
    note(ctx, "warn", "malformed", (stop - size - SIZE_LEN) .. " bytes beyond the frame size " .. size)
    stop = size + SIZE_LEN
  elseif size + SIZE_LEN > stop and not partial then
    note(ctx, "error", "malformed",
      "frame size says " .. size .. " bytes but only " .. (stop - SIZE_LEN) .. " present")
  end
  if tree then tree:add(F.size, tvb(0, SIZE_LEN)) end
  local wire_key = uint_of(tvb(SIZE_LEN, 2))
  local version = uint_of(tvb(SIZE_LEN + 2, 2))
  local key = wire_key
  if has_bit(wire_key, RESPONSE_BIT) then key = wire_key - RESPONSE_BIT end
  frame.wire_key, frame.key, frame.version = wire_key, key, version
  local command = SPEC.commands[key]
  local layout = SPEC.layouts[wire_key]
  frame.command = command and command.name or nil
  if tree then
    local item = tree:add(F.key, tvb(SIZE_LEN, 2), key)
    if wire_key ~= key then item:append_text(", response (" .. hex(wire_key, 4) .. ")") end
    tree:add(F.version, tvb(SIZE_LEN + 2, 2))
  end
  local pos = SIZE_LEN + 4
  if layout == nil then
    frame.kind = has_bit(wire_key, RESPONSE_BIT) and "response" or "unknown"
    if command == nil then
      note(ctx, "warn", "malformed", "unknown command key " .. hex(key, 4))
    else
      note(ctx, "warn", "malformed",
        command.name .. " has no " .. frame.kind .. " layout (key " .. hex(wire_key, 4) .. ")")
    end
    if pos < stop then
      frame.fields.payload = true
      if tree then tree:add(F.payload, tvb(pos, stop - pos)) end
    end
    return frame
  end
  frame.kind = layout.kind
  local layout_version = version
  if not contains(command.versions, version) then
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
  local ok, result = pcall(decode_fields, layout.fields, layout_version, tvb, pos, stop, frame.fields, tree, ctx)
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
  if pos < stop then
    frame.fields.trailing = true
    if tree then tree:add(F.trailing, tvb(pos, stop - pos)) end
    note(ctx, "warn", "malformed", (stop - pos) .. " bytes after the last field")
  end
  local parts = {}
  info_parts(layout.fields, frame.fields, parts)
  frame.info = table.concat(parts, " ")
  return frame
end

-- The conversation tracker: links and findings, from SPEC.conversation ---------------------

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
local ACKS_SENT, ACKS_CONFIRMED, ACKS_FAILED = {}, {}, {}
for name, ack in pairs(CONV.acks) do
  ack.name = name
  ACKS_SENT[ack.send.command] = ack
  ACKS_CONFIRMED[ack.confirm.command] = ack
  if ack.fail then ACKS_FAILED[ack.fail.command] = ack end
end
local GRANTS = {}
if CONV.credit then
  for _, ref in ipairs(CONV.credit.grant) do GRANTS[ref.command] = ref end
end
-- Per wire key: the status field's enum, and the request strings worth naming in findings.
local STATUS_ENUM, NAMED = {}, {}
for wire_key, layout in pairs(SPEC.layouts) do
  NAMED[wire_key] = {}
  for _, spec in ipairs(layout.fields) do
    if spec.name == CONV.status and spec.enum then STATUS_ENUM[wire_key] = VS[spec.enum] end
    if spec.type == "string" and spec.info and not (CONV.close and spec.name == CONV.close.reason) then
      table.insert(NAMED[wire_key], spec.name)
    end
  end
end
-- Enum names the generator resolved from the spec's references (none: codes shown in hex).
local CLOSE_ENUM = CONV.close and VS[CONV.close.enum] or {}
local ANNOUNCE_ENUM = CONV.announcement and VS[CONV.announcement.enum] or {}
local FAIL_ENUMS = {}
for name, ack in pairs(CONV.acks) do FAIL_ENUMS[name] = VS[ack.fail_enum] or {} end

local function set_of(list)
  local out = {}
  for _, v in ipairs(list) do out[v] = true end
  return out
end
local OK, ROUTINE, SETUP = set_of(CONV.ok), set_of(CONV.routine), set_of(CONV.setup)

local function named(enum, code)
  local name = enum and enum[code]
  if name then return string.format("%s (0x%02x)", name, code) end
  return string.format("code 0x%02x", code)
end

local function is_number(v) return type(v) == "number" end

-- Every value a path names, stepping through arrays and structs.
local function path_values(fields, path, index, out)
  index, out = index or 1, out or {}
  local value = fields[path[index]]
  if type(value) == "table" and value.pos == nil and #value > 0 then
    for _, item in ipairs(value) do
      if index == #path then
        if type(item) ~= "table" or getmetatable(item) ~= nil then out[#out + 1] = item end
      elseif type(item) == "table" then
        path_values(item, path, index + 1, out)
      end
    end
  elseif index == #path then
    if value ~= nil and (type(value) ~= "table" or getmetatable(value) ~= nil) then out[#out + 1] = value end
  elseif type(value) == "table" then
    path_values(value, path, index + 1, out)
  end
  return out
end

local function links_of(f)
  f.links = f.links or {}
  return f.links
end

local function tnote(f, severity, group, message)
  f.tnotes = f.tnotes or {}
  f.tnotes[#f.tnotes + 1] = { severity = severity, group = group, message = message }
end

local function new_conn()
  return {
    pending = {}, sessions = {}, in_flight = {}, credits = {}, last_grant = {}, announced = {},
    versions = {}, client_last = nil, negotiated = nil, negotiated_in = nil, user = nil,
  }
end

local function side_key(b) return b and "c" or "s" end

local function asked(request, response)
  if request == nil then
    return string.format("%s (response at packet %d)", response.command, response.number)
  end
  local about = {}
  for _, name in ipairs(NAMED[request.wire_key] or {}) do
    local v = request.fields[name]
    if type(v) == "string" then about[#about + 1] = name:gsub("_", " ") .. " " .. quoted(v) end
  end
  local detail = #about > 0 and (" for " .. table.concat(about, ", ")) or ""
  return string.format("%s%s (packet %d)", request.command, detail, request.number)
end

local function announced(conn, values)
  local name = CONV.announcement and CONV.announcement.about
  if values == nil or name == nil then return "" end
  local subject = values[name]
  local said = type(subject) == "string" and conn.announced[subject] or nil
  if said == nil then return "" end
  return string.format("; at packet %d the broker had announced %s %s: %s", said[1], name, quoted(subject), said[2])
end

local function session_name(kind, sid, session)
  local stream = session and session.values.stream
  if stream and stream ~= "" then return kind .. " " .. sid .. " (stream " .. quoted(stream) .. ")" end
  return kind .. " " .. sid
end

local function credit_refused(conn, f, code, what)
  local sid = f.fields[CONV.sessions[CONV.credit.session].id]
  local grant = sid ~= nil and conn.last_grant[sid] or nil
  local where = ""
  if grant then
    local links = links_of(f)
    links.request_in = grant.number
    links.response_time = round6(f.ts - grant.ts)
    links_of(grant).response_in = f.number
    where = " (packet " .. grant.number .. ")"
  end
  tnote(f, "warn", "response_code",
    string.format("%s for subscription %s%s refused: %s", f.command, tostring(sid), where, what))
end

local function status(conn, f, request)
  if CONV.status == nil then return end
  local code = f.fields[CONV.status]
  if not is_number(code) or OK[code] then return end
  local what = named(STATUS_ENUM[f.wire_key], code)
  if request == nil and CONV.credit and f.command == CONV.credit.refusal then
    credit_refused(conn, f, code, what)
    return
  end
  if ROUTINE[code] then
    tnote(f, "note", "response_code", asked(request, f) .. " answered " .. what .. " (a routine answer)")
    return
  end
  if f.command == CONV.authenticate then
    local how = ""
    if request then
      local user = conn.user and (", user " .. quoted(conn.user)) or ""
      how = string.format(" (%s%s, packet %d)", tostring(request.fields.mechanism), user, request.number)
    end
    tnote(f, "error", "response_code",
      "authentication failed: the broker answered " .. f.command .. how .. " with " .. what)
    return
  end
  local severity = SETUP[f.command] and "error" or "warn"
  tnote(f, severity, "response_code",
    asked(request, f) .. " failed: " .. what .. announced(conn, request and request.fields))
end

local function correlate(conn, f)
  local corr = f.fields[CONV.correlation]
  if not is_number(corr) then
    if f.kind == "response" then status(conn, f, nil) end
    return
  end
  local asker = f.from_client
  if f.kind ~= "request" then asker = not f.from_client end
  local key = side_key(asker) .. corr
  if f.kind == "request" then
    local earlier = conn.pending[key]
    if earlier then
      tnote(f, "warn", "sequence", string.format(
        "%s request reuses correlation id %d while the %s request of packet %d is still unanswered",
        f.command, corr, earlier.command, earlier.number))
    end
    conn.pending[key] = f
    f.pending = true
    return
  end
  if f.kind ~= "response" then return end
  local request = conn.pending[key]
  if request and request.command ~= f.command then
    tnote(f, "warn", "sequence", string.format(
      "%s response with correlation id %d answers a %s request (packet %d)",
      f.command, corr, request.command, request.number))
    request = nil
  end
  if request == nil then
    status(conn, f, nil)
    return
  end
  conn.pending[key] = nil
  local links = links_of(f)
  links.request_in = request.number
  if f.ts >= request.ts then links.response_time = round6(f.ts - request.ts) end
  links_of(request).response_in = f.number
  status(conn, f, request)
  request.pending = nil
  request.fields = nil  -- answered: only its number and links stay
end

local function negotiation(conn, f)
  local fields = f.fields
  if CONV.tune and f.command == CONV.tune.command then
    local frame_max, heartbeat = fields[CONV.tune.frame_max], fields[CONV.tune.heartbeat]
    if is_number(frame_max) and is_number(heartbeat) and f.from_client then
      conn.negotiated, conn.negotiated_in = frame_max, f.number
    end
  end
  if CONV.versions and f.command == CONV.versions.command then
    local items = fields[CONV.versions.path[1]]
    if type(items) == "table" then
      local known = {}
      for _, item in ipairs(items) do
        if item.command_key and item.min_version and item.max_version then
          known[item.command_key] = { item.min_version, item.max_version }
        end
      end
      conn.versions[side_key(f.from_client)] = known
    end
  end
  if f.command == CONV.authenticate and f.kind == "request" and CONV_HOOKS.user then
    conn.user = CONV_HOOKS.user(fields)
  end
  if CONV.close and f.command == CONV.close.command and f.kind == "request" and not f.from_client then
    local code = fields[CONV.close.code]
    if is_number(code) then
      local what = named(CLOSE_ENUM, code)
      local reason = fields[CONV.close.reason]
      local said = (reason and reason ~= "") and (" " .. quoted(reason)) or ""
      local before = conn.client_last
      local last = ""
      if before then
        local hint = CONV.close_hints[code]
        last = string.format("; the client's last frame before it was %s (key %s, version %d, %d bytes, packet %d)",
          before.command or string.format("Unknown(%s)", hex(before.key, 4)), hex(before.wire_key, 4),
          before.version, before.length, before.number) .. (hint and (": " .. hint) or "")
      end
      tnote(f, OK[code] and "note" or "error", "protocol",
        "the broker closed the connection: " .. what .. said .. last)
    end
  end
  local theirs = conn.versions[side_key(not f.from_client)]
  local range = theirs and theirs[f.key]
  if range and (f.version < range[1] or f.version > range[2]) then
    tnote(f, "warn", "protocol", string.format(
      "%s version %d is outside the versions the peer announced (%d..%d)", f.command, f.version, range[1], range[2]))
  end
end

local function sessions(conn, f)
  for _, role in ipairs(SESSION_OF[f.command] or {}) do
    local spec = CONV.sessions[role.name]
    local sid = f.fields[spec.id]
    if is_number(sid) then
      local key = role.name .. ":" .. sid
      if role.role == "open" and f.kind == "request" then
        for _, ack in pairs(CONV.acks) do
          if ack.session == role.name then conn.in_flight[ack.name .. ":" .. sid] = nil end
        end
        local values = {}
        for _, name in ipairs(spec.keep) do values[name] = f.fields[name] end
        conn.sessions[key] = { opened_in = f.number, values = values, keep = spec.keep }
      elseif role.role == "close" and f.kind == "request" then
        conn.sessions[key] = nil
        for _, ack in pairs(CONV.acks) do
          if ack.session == role.name then conn.in_flight[ack.name .. ":" .. sid] = nil end
        end
      elseif role.role == "use" then
        local session = conn.sessions[key]
        if session then
          local links = links_of(f)
          links.opened_in = session.opened_in
          links.kept = {}
          for _, name in ipairs(session.keep) do
            if session.values[name] ~= nil then table.insert(links.kept, { name, session.values[name] }) end
          end
        end
      end
    end
  end
end

local function acks(conn, f)
  local command = f.command
  local ack = ACKS_SENT[command]
  if ack and f.kind ~= "response" then
    local sid = f.fields[CONV.sessions[ack.session].id]
    if not is_number(sid) then return end
    local key = ack.name .. ":" .. sid
    conn.in_flight[key] = conn.in_flight[key] or {}
    local flight = conn.in_flight[key]
    for _, item in ipairs(path_values(f.fields, ack.send.path)) do
      flight[tostring(item)] = { f.number, f.ts }
    end
    return
  end
  local failing = ACKS_FAILED[command] ~= nil
  ack = ACKS_FAILED[command] or ACKS_CONFIRMED[command]
  if ack == nil then return end
  local sid = f.fields[CONV.sessions[ack.session].id]
  if not is_number(sid) then return end
  local ref = failing and ack.fail or ack.confirm
  local flight = conn.in_flight[ack.name .. ":" .. sid] or {}
  local sent_in, waited, any = {}, {}, false
  for index, item in ipairs(path_values(f.fields, ref.path)) do
    local sent = flight[tostring(item)]
    flight[tostring(item)] = nil
    if sent then
      sent_in[index], waited[index], any = sent[1], round6(f.ts - sent[2]), true
    end
  end
  if any then
    local links = links_of(f)
    links.publish_in, links.confirm_time = sent_in, waited
  end
  if failing and ack.fail_code then
    local counts, codes = {}, {}
    for _, code in ipairs(path_values(f.fields, ack.fail_code.path)) do
      if counts[code] == nil then codes[#codes + 1] = code end
      counts[code] = (counts[code] or 0) + 1
    end
    table.sort(codes)
    local session = conn.sessions[ack.session .. ":" .. sid]
    local where = session_name(ack.session, sid, session)
    local gone = announced(conn, session and session.values)
    for _, code in ipairs(codes) do
      local count = counts[code]
      tnote(f, "warn", "response_code", string.format("%d %s%s of %s refused: %s%s", count, ack.noun,
        count ~= 1 and "s" or "", where, named(FAIL_ENUMS[ack.name], code), gone))
    end
  end
end

local function credit(conn, f)
  local spec = CONV.credit
  local sid = f.fields[CONV.sessions[spec.session].id]
  if not is_number(sid) then return end
  local grant = GRANTS[f.command]
  if grant and f.kind ~= "response" then
    local amount = f.fields[grant.path[1]]
    if not is_number(amount) then return end
    conn.last_grant[sid] = f
    if f.command == CONV.sessions[spec.session].open then
      conn.credits[sid] = amount
    elseif conn.credits[sid] ~= nil then
      conn.credits[sid] = conn.credits[sid] + amount
    end
  elseif f.command == spec.spend then
    local left = conn.credits[sid]
    if left == nil or left == 0 then return end
    conn.credits[sid] = left - 1
    links_of(f).credit_left = left - 1
  elseif f.command == CONV.sessions[spec.session].close and f.kind == "request" then
    conn.credits[sid] = nil
  end
end

local function announcement(conn, f)
  local spec = CONV.announcement
  local code, subject = f.fields[spec.code], f.fields[spec.about]
  if not is_number(code) or type(subject) ~= "string" or OK[code] then return end
  local what = named(ANNOUNCE_ENUM, code)
  conn.announced[subject] = { f.number, what }
  tnote(f, "note", "protocol", string.format("the broker announced %s %s: %s", spec.about, quoted(subject), what))
end

local function track(conn, f)
  if conn.negotiated and conn.negotiated > 0 and f.length > conn.negotiated then
    tnote(f, "error", "protocol", string.format(
      "%s frame of %d bytes exceeds the frame_max of %d bytes negotiated at packet %d",
      f.command or string.format("Unknown(%s)", hex(f.key or 0, 4)), f.length, conn.negotiated, conn.negotiated_in))
  end
  if f.command and f.kind ~= "unknown" then
    if CONV.correlation then correlate(conn, f) end
    negotiation(conn, f)
    if SESSION_OF[f.command] then sessions(conn, f) end
    if ACKS_SENT[f.command] or ACKS_CONFIRMED[f.command] or ACKS_FAILED[f.command] then acks(conn, f) end
    if CONV.credit then credit(conn, f) end
    if CONV.announcement and f.command == CONV.announcement.command then announcement(conn, f) end
  end
  if f.from_client then conn.client_last = f end
end
