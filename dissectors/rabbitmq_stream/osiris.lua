-- Lua twin of dissectors/rabbitmq_stream/osiris.py: Osiris entries (Publish) and chunks (Deliver),
-- their CRC-32, sub-batches (uncompressed, gzip, and zstd where Wireshark's Lua API can
-- inflate them: zstd from 4.4), records with their offsets, tracking entries, and AMQP
-- messages (their sections, and their values when a tree is built).

-- An entry's name where an error says it: "entry 7" in a chunk, made only then (a chunk has
-- thousands of entries).
local function entry_named(name, index)
  return index and (name .. " " .. index) or name
end

-- The entry at pos: a table, or raises short/bad like layout.py (offsets from base), naming
-- it entry_named(name, index).
local function read_entry(tvb, pos, stop, name, base, index)
  base = base or 0
  if stop - pos < 4 then short(entry_named(name, index), pos - base, 4, stop - pos) end
  local first, b, c, d = tvb:raw(pos, 4):byte(1, 4)  -- one read
  if first < 0x80 then
    local size = ((first * 256 + b) * 256 + c) * 256 + d
    if stop - pos - 4 < size then short(entry_named(name, index), pos + 4 - base, size, stop - pos - 4) end
    -- (a simple entry's record is the rest: at pos + 4, size - 4 bytes; four fields are half the
    -- table six are, and a Publish or a chunk has one per message)
    return { kind = 0, size = 4 + size, pos = pos, record_count = 1 }
  end
  if stop - pos < 11 then short(entry_named(name, index), pos - base, 11, stop - pos) end
  local count, uncompressed, length = uint_of(tvb(pos + 1, 2)), uint_of(tvb(pos + 3, 4)), uint_of(tvb(pos + 7, 4))
  if length > 0x7FFFFFFF then
    bad(entry_named(name, index), pos + 7 - base, entry_named(name, index) .. ": sub-batch length " .. length .. " is impossible")
  end
  local start = pos + 11
  if stop - start < length then short(entry_named(name, index), start - base, length, stop - start) end
  return {
    kind = 1, size = 11 + length, pos = pos, body = start, body_len = length,
    compression = math.floor(first / 16) % 8, record_count = count,
    uncompressed_length = uncompressed, length = length,
  }
end

local function describe_entry(entry)
  -- all of it, length field included, as its size item says
  if entry.kind == 0 then return string.format("Simple entry, %d bytes", entry.size) end
  local codec = VS.compression[entry.compression] or ("unknown compression " .. entry.compression)
  return string.format("Sub-batch, %d records, %s: %d bytes, %d uncompressed",
    entry.record_count, codec, entry.length, entry.uncompressed_length)
end

-- This file's helpers that the general path and a plain chunk's share, and the plain chunk's own
-- (one table, not locals: the plugin's main chunk is near Lua's limit of 200).
local OSIRIS = {}

-- Texts that entries and records repeat by the hundred a frame ("Entry 7: ", "Simple entry,
-- 109 bytes"), made once: under Lua 5.2 string.format, a number written into text and a UInt64's
-- tostring were a tenth of a -V run over Deliver traffic (bench/README.md, "Eleventh round").
-- At most 4,096 texts of each kind are kept: their keys, sizes among them, come from the wire.
OSIRIS.texts = setmetatable({}, { __index = function(all, kind) all[kind] = { n = 0 }; return all[kind] end })

-- string.format(fmt, ...), kept in texts under key (called where texts has no such key).
function OSIRIS.text(texts, key, fmt, ...)
  local text = string.format(fmt, ...)
  if texts.n < 4096 then texts.n, texts[key] = texts.n + 1, text end
  return text
end

-- chunk_id + index as text, for a chunk id a number holds: its thousands' made once a chunk (heads).
function OSIRIS.offset_text(chunk_id, index, heads)
  local rest = chunk_id % 1000 + index
  local three = rest % 1000
  local thousands = (chunk_id - chunk_id % 1000 + rest - three) / 1000
  local head = heads[thousands] or OSIRIS.text(heads, thousands, thousands > 0 and "%d" or "", thousands)
  local texts = OSIRIS.texts[head == "" and "%d" or "%03d"]
  return head .. (texts[three] or OSIRIS.text(texts, three, head == "" and "%d" or "%03d", three))
end

-- A simple entry at pos, size bytes with its length field, as "label index: ..." (a chunk's) or
-- "label: ..." (a Publish message's, index nil): its items, by the thousand (one string each).
-- range: its bytes, and size_range: its length field's, where the caller has made them.
function OSIRIS.simple_entry(tree, tvb, pos, size, field, label, index, range, size_range)
  local add = TI.add
  local item = add(tree, field, range or tvb(pos, size))
  local texts, sizes = OSIRIS.texts[label], OSIRIS.texts.simple
  if index then
    TI.set_text(item, (texts[index] or OSIRIS.text(texts, index, "%s %d: ", label, index))
      .. (sizes[size] or OSIRIS.text(sizes, size, "Simple entry, %d bytes", size)))
  else
    TI.set_text(item, texts[-1 - size] or OSIRIS.text(texts, -1 - size, "%s: Simple entry, %d bytes", label, size))
  end
  add(item, F.entry_kind, tvb(pos, 1), 0)
  -- The whole entry's size, worked out from its length field (the bytes it highlights).
  TI.set_generated(add(item, F.entry_size, size_range or tvb(pos, 4), size))
  return item
end

-- range: the entry's whole bytes, where the caller has made it (one TvbRange for its items).
-- The item reads "label: ...", or "label index: ..." where index is given.
local function show_entry(tree, tvb, entry, field, label, range, index)
  if tree == nil then return nil end
  if entry.kind == 0 then
    return OSIRIS.simple_entry(tree, tvb, entry.pos, entry.size, field, label, index, range)
  end
  local add = TI.add
  local item = add(tree, field, range or tvb(entry.pos, entry.size))
  TI.set_text(item, entry_named(label, index) .. ": " .. describe_entry(entry))
  add(item, F.entry_kind, tvb(entry.pos, 1), entry.kind)
  -- The whole entry's size, worked out from its length field (the bytes it highlights).
  TI.set_generated(add(item, F.entry_size, tvb(entry.kind == 0 and entry.pos or entry.pos + 7, 4), entry.size))
  if entry.kind == 1 then
    item:add(F.compression, tvb(entry.pos, 1), entry.compression)
    item:add(F.record_count, tvb(entry.pos + 1, 2))
    item:add(F.uncompressed_length, tvb(entry.pos + 3, 4))
    item:add(F.length, tvb(entry.pos + 7, 4))
  end
  return item
end

local function decode_tracking(tvb, pos, len, tree, ctx, snapshot, field)
  local out, at, stop = {}, pos, pos + len
  while at < stop do
    if stop - at < 2 then
      note(ctx, "warn", "malformed", "tracking data ends inside an entry header at byte " .. (at - pos))
      break
    end
    local kind, id_size = uint_of(tvb(at, 1)), uint_of(tvb(at + 1, 1))
    local two = snapshot and kind == 0
    local need = 2 + id_size + (two and 16 or 8)
    if stop - at < need then
      note(ctx, "warn", "malformed", string.format("tracking entry at byte %d needs %d bytes, %d left",
        at - pos, need, stop - at))
      break
    end
    local item = { tracking_type = kind }
    local child
    if tree then
      child = tree:add(field, tvb(at, need))
      child:add(F.tracking_type, tvb(at, 1))
      child:add(F.id, tvb(at + 1, 1 + id_size), id_size > 0 and tvb(at + 2, id_size):string(ENC_UTF_8) or "")
    end
    local values = at + 2 + id_size
    if two then
      if child then child:add(F.chunk_id, tvb(values, 8)) end
      values = values + 8
    end
    item.value = tvb(values, 8):uint64()
    if child then
      child:add(F.value, tvb(values, 8))
      local what = VS.tracking_type[kind] or ("type " .. kind)
      child:set_text(string.format("Tracking %s %s: %s", what,
        quoted(id_size > 0 and tvb(at + 2, id_size):string(ENC_UTF_8) or ""), tostring(item.value)))
    end
    out[#out + 1] = item
    at = at + need
  end
  return out
end

-- Splits a sub-batch body into its records: a list of {tvb, pos, len}.
local function split_records(btvb, bpos, blen, entry, where, ctx)
  local out, at, stop = {}, bpos, bpos + blen
  for n = 0, entry.record_count - 1 do
    if stop - at < 4 or stop - at - 4 < uint_of(btvb(at, 4)) then
      note(ctx, "error", "malformed", string.format(
        "%s: sub-batch declares %d records but its body ends inside record %d", where, entry.record_count, n))
      return out
    end
    local size = uint_of(btvb(at, 4))
    out[#out + 1] = { tvb = btvb, pos = at + 4, len = size }
    at = at + 4 + size
  end
  if at ~= stop then
    note(ctx, "warn", "malformed", string.format("%s: %d bytes after the sub-batch's last record", where, stop - at))
  end
  return out
end

-- The content size a zstd body's frames state, summed, found by walking their headers and
-- block headers; nil and why where that cannot be known. Wireshark's zstd inflate has no output
-- bound (a bomb of a few hundred MiB aborts tshark 4.4), so only a body whose frames all state
-- a size that fits the sub-batch's is handed to it. Lua 5.2 has no bit operators: arithmetic.
local FCS_BYTES = { [0] = 0, 2, 4, 8 }
local DICT_BYTES = { [0] = 0, 1, 2, 4 }
local function zstd_stated(tvb, pos, len)
  local at, stop, total = pos, pos + len, 0
  while at < stop do
    if stop - at < 6 or tvb:raw(at, 4) ~= "\x28\xb5\x2f\xfd" then
      return nil, "zstd data does not start with a zstd frame magic"
    end
    local fhd = tvb(at + 4, 1):uint()
    local single, checksum = math.floor(fhd / 32) % 2, math.floor(fhd / 4) % 2
    local size_bytes = FCS_BYTES[math.floor(fhd / 64)]
    if size_bytes == 0 then size_bytes = single end
    if size_bytes == 0 then return nil, "its zstd frame does not state its content size", true end
    local p = at + 5 + (1 - single) + DICT_BYTES[fhd % 4]
    if p + size_bytes > stop then return nil, "zstd data is corrupt" end
    if size_bytes == 8 and tvb(p + 4, 4):le_uint() > 0 then return nil, "zstd data states more than 4 GiB" end
    local size = tvb(p, math.min(size_bytes, 4)):le_uint() + (size_bytes == 2 and 256 or 0)
    total = total + size
    at = p + size_bytes
    local last = 0
    while last == 0 do
      if at + 3 > stop then return nil, "zstd data is corrupt" end
      local h = tvb(at, 3):le_uint()
      last = h % 2
      at = at + 3 + (math.floor(h / 2) % 4 == 1 and 1 or math.floor(h / 8))
    end
    at = at + 4 * checksum
  end
  if at ~= stop then return nil, "zstd data is corrupt" end
  return total
end

-- A zstd sub-batch's body inflated, where Wireshark's Lua has TvbRange:uncompress_zstd (4.4
-- and later; 4.0's has none): the tvb, or nil and why not in codecs/compression.py's words;
-- false where there is no such method.
local function unzstd(tvb, pos, len, declared)
  local found, fn = pcall(function() return tvb(pos, len).uncompress_zstd end)
  if not found or not fn then return false end
  local stated, why, undecoded = zstd_stated(tvb, pos, len)
  if stated == nil then return nil, why, undecoded end
  if stated > declared then return nil, "zstd output is longer than the declared " .. declared .. " bytes" end
  local ok, out = pcall(fn, tvb(pos, len), "zstd sub-batch")
  if not ok or out == nil then return nil, "zstd data is corrupt" end
  local n = int(out:len())
  if n > declared then return nil, "zstd output is longer than the declared " .. declared .. " bytes" end
  if n ~= declared then return nil, string.format("zstd output is %d bytes but the header declares %d", n, declared) end
  return out
end

-- The records of a sub-batch as {tvb, pos, len} bodies; sets entry.framing. (A simple entry's
-- one record is read where it is: its callers take it from the entry.)
local function entry_bodies(tvb, entry, where, ctx)
  local budget = budget_of(ctx)
  if entry.uncompressed_length > budget.bytes then
    budget_refuse(ctx, where, entry.record_count .. " records not decoded")
    return {}
  end
  budget.bytes = budget.bytes - entry.uncompressed_length
  if entry.compression == 0 then
    entry.framing = "none"
    return split_records(tvb, entry.body, entry.body_len, entry, where, ctx)
  end
  if entry.compression == 1 then
    -- Wireshark's inflate has no output bound: a gzip member's trailer (ISIZE, its size mod
    -- 2^32) tells a bomb claiming fewer bytes before anything is inflated.
    local len = entry.body_len
    if len >= 18 and tvb:raw(entry.body, 2) == "\x1f\x8b" and tvb(entry.body + len - 4, 4):le_uint() > entry.uncompressed_length then
      note(ctx, "error", "malformed", string.format(
        "%s: sub-batch: gzip output is longer than the declared %d bytes", where, entry.uncompressed_length))
      return {}
    end
    local out = inflate(tvb, entry.body, entry.body_len, "gzip sub-batch")
    if out == nil then
      note(ctx, "error", "malformed", where .. ": sub-batch: gzip data does not inflate")
      return {}
    end
    entry.framing = "gzip"
    return split_records(out, 0, int(out:len()), entry, where, ctx)
  end
  if entry.compression == 4 then
    local out, why, undecoded = unzstd(tvb, entry.body, entry.body_len, entry.uncompressed_length)
    if out == nil and undecoded then
      note(ctx, "note", "undecoded", where .. ": sub-batch: " .. why ..
        ": not inflated, as Wireshark's Lua API could not bound its output; its records are not shown")
      return {}
    end
    if out == nil then
      note(ctx, "error", "malformed", where .. ": sub-batch: " .. why)
      return {}
    end
    if out then
      entry.framing = "zstd frame"
      return split_records(out, 0, int(out:len()), entry, where, ctx)
    end
  end
  local codec = VS.compression[entry.compression] or ("compression " .. entry.compression)
  note(ctx, "note", "undecoded", string.format(
    "%s: sub-batch compressed with %s: Wireshark's Lua API cannot decompress it; its records are not shown",
    where, codec))
  return {}
end

-- The registry's declaration of a record's AMQP message: the struct naming its sections.
for _, member in ipairs(SPEC.structs.osiris_record) do
  if member.name == "message" then AMQPV.record_message = member.struct end
end

-- Twin of streamdump.codecs.amqp_content: notes on a message's content that point at a client
-- bug (a null among the values an application fills, a body its content_type does not describe).
-- (Kept in AMQPV: the generated file's main chunk is near Lua's limit of 200 locals.)
AMQPV.CONTENT_MAPS = { [0x71] = true, [0x72] = true, [0x74] = true, [0x78] = true }
-- content_type's place among the properties section's fields, as the registry declares them.
for i, member in ipairs(SPEC.structs[AMQPV.by_section(AMQPV.record_message).properties.struct]) do
  if member.name == "content_type" then AMQPV.CONTENT_TYPE = i end
end

-- Whether s is UTF-8 as Python's strict decoder has it (no overlongs, surrogates or > U+10FFFF).
function AMQPV.utf8_valid(s)
  if not s:find("[\128-\255]") then return true end
  local i, n = 1, #s
  while i <= n do
    local c = s:byte(i)
    if c < 0x80 then
      i = i + 1
    else
      local need, lo, hi
      if c >= 0xc2 and c <= 0xdf then need, lo, hi = 1, 0x80, 0xbf
      elseif c == 0xe0 then need, lo, hi = 2, 0xa0, 0xbf
      elseif c == 0xed then need, lo, hi = 2, 0x80, 0x9f
      elseif c >= 0xe1 and c <= 0xef then need, lo, hi = 2, 0x80, 0xbf
      elseif c == 0xf0 then need, lo, hi = 3, 0x90, 0xbf
      elseif c >= 0xf1 and c <= 0xf3 then need, lo, hi = 3, 0x80, 0xbf
      elseif c == 0xf4 then need, lo, hi = 3, 0x80, 0x8f
      else return false end
      local d = s:byte(i + 1)
      if d == nil or d < lo or d > hi then return false end
      for k = 2, need do
        d = s:byte(i + k)
        if d == nil or d < 0x80 or d > 0xbf then return false end
      end
      i = i + need + 1
    end
  end
  return true
end

function AMQPV.body_mismatch(content_type, body)
  local kind = content_type:match("^[^;]*"):match("^%s*(.-)%s*$"):lower()
  local subtype = kind:match("/(.*)$") or ""
  local is_json = subtype == "json" or subtype:sub(-5) == "+json"
  if not is_json and kind:sub(1, 5) ~= "text/" then return nil end
  if not AMQPV.utf8_valid(body) then
    return string.format("content_type '%s' says %s, but the body is not UTF-8", content_type,
      is_json and "JSON" or "text")
  end
  if is_json and not pcall(json_parse, body) then
    return string.format("content_type '%s' says JSON, but the body does not parse as JSON", content_type)
  end
  return nil
end

-- Twin of amqp._check_order: sections out of the spec's order, repeated, or mixing body kinds.
AMQPV.RANK = { [0x70] = 0, [0x71] = 1, [0x72] = 2, [0x73] = 3, [0x74] = 4, [0x75] = 5, [0x76] = 5, [0x77] = 5, [0x78] = 6 }
-- (The notes' texts, and the set of codes seen, are made only where there is one to say or a
-- second section to compare: a chunk holds thousands of one-section messages.)
function AMQPV.order_note(ctx, s, text)
  note(ctx, "note", "malformed", string.format("AMQP 1.0 message: %s section at offset %d%s",
    SPEC.enums.amqp_section[s.code], s.pos, text))
end

function AMQPV.order_notes(sections, err, ctx)
  local names, last, body, seen, say = SPEC.enums.amqp_section, nil, nil, nil, AMQPV.order_note
  for i = 1, #sections do
    local s = sections[i]
    local rank = AMQPV.RANK[s.code]
    if last and rank < AMQPV.RANK[last.code] then
      say(ctx, s, string.format(" comes after %s, out of the spec's order", names[last.code]))
    end
    if rank == 5 then
      if body == nil then
        body = s
      elseif body.code ~= s.code then
        say(ctx, s, string.format(" mixes body kinds: the body started as %s", names[body.code]))
      elseif s.code == 0x77 then
        say(ctx, s, ": a message has at most one amqp_value section")
      end
    elseif seen and seen[s.code] then
      say(ctx, s, string.format(" repeats an earlier %s section", names[s.code]))
    end
    if i < #sections then
      seen = seen or {}
      seen[s.code] = true
    end
    last = s
  end
  if body == nil and err == nil and #sections > 0 then
    note(ctx, "note", "malformed", "AMQP 1.0 message: message has no body section (data, amqp_sequence or amqp_value)")
  end
end

function AMQPV.content_notes(btvb, sections, ctx)
  -- a data section's body is copied only when a content_type says what it should be
  local names, content_type, body, bodies = SPEC.enums.amqp_section, nil, nil, 0
  for i = 1, #sections do
    local s = sections[i]
    if AMQPV.CONTENT_MAPS[s.code] or s.code == 0x73 then
      local ok, value = pcall(AMQPV.value, btvb, s.value_at, s.pos + s.len, 1)
      if ok and value.t == "map" and AMQPV.CONTENT_MAPS[s.code] then
        for _, pair in ipairs(value.v) do
          if pair[2].t == "null" then
            note(ctx, "note", "content", string.format(
              "AMQP 1.0 message: %s '%s' is null: no value crossed the wire (a client that cannot encode a value's type may write null)",
              (names[s.code]:gsub("_", " ")), AMQPV.text(pair[1])))
          end
        end
      elseif ok and value.t == "list" and s.code == 0x73 then
        local item = value.v[AMQPV.CONTENT_TYPE]
        if item ~= nil and item.t == "text" then content_type = item.v end
      end
    elseif s.code == 0x75 and (s.value_code == 0xa0 or s.value_code == 0xb0) then
      body, bodies = s, bodies + 1
    end
  end
  if content_type and bodies == 1 then
    local start = body.value_at + (body.value_code == 0xa0 and 2 or 5)
    local said = AMQPV.body_mismatch(content_type, btvb:raw(start, body.pos + body.len - start))
    if said then note(ctx, "note", "content", "AMQP 1.0 message: " .. said) end
  end
end

-- Whether the frame's budget of records takes one more (counted), else it is told once: where
-- an entry's index or a Publish message's id says, left the records not decoded.
local function take_record(ctx, index, message, left)
  local budget = budget_of(ctx)
  if budget.records <= 0 then
    local where = index and entry_named("entry", index) or ("message " .. tostring(message))
    budget_refuse(ctx, where, left .. " records not decoded")
    return false
  end
  budget.records = budget.records - 1
  return true
end

-- A record's item, len bytes at pos of btvb, and the items every record has: its offset (a
-- chunk's, counted) and entry index where known, its size (size_range: its length field, where
-- the caller has made it). Returns the item and the record's TvbRange, for its message's items.
function OSIRIS.record(holder, btvb, pos, len, offset, entry_index, size_range)
  local add = TI.add
  local whole = btvb(pos, len)
  local child = add(holder, F.records, whole)
  -- Counted, not read: generated, on none of the record's bytes.
  local nowhere = (offset or entry_index) and btvb(pos, 0)
  if offset then TI.set_generated(add(child, F.offset, nowhere, offset)) end
  if entry_index then TI.set_generated(add(child, F.entry_index, nowhere, entry_index)) end
  add(child, F.record_size, size_range or btvb(pos - 4, 4), len)  -- the record's length field
  return child, whole
end

-- The record item's text, once what it holds is known (kind: ", AMQP 1.0" and the like).
-- offset_text: its offset as text, where the caller has made it (OSIRIS.offset_text).
function OSIRIS.record_text(child, offset, len, kind, offset_text)
  local texts = OSIRIS.texts[kind]
  if offset then
    TI.set_text(child, "Record at offset " .. (offset_text or tostring(offset))
      .. (texts[len] or OSIRIS.text(texts, len, ": %d bytes%s", len, kind)))
  else
    TI.set_text(child, texts[-1 - len] or OSIRIS.text(texts, -1 - len, "Record: %d bytes%s", len, kind))
  end
end

-- The data section's field of a record's message as the registry declares it, where it is bytes
-- (what the plain paths below show): nil otherwise.
function OSIRIS.data_field()
  local spec = AMQPV.record_message and AMQPV.by_section(AMQPV.record_message)[SPEC.enums.amqp_section[0x75]]
  return spec and spec.type == "bytes" and F[spec.name] or nil
end

-- A record of one data section (AMQP_WALK.lone_data), size bytes at record_pos, its bytes from
-- byte i of data (a copy the caller made): the items show_record gives it, with no walk.
-- size_range: its length field, as OSIRIS.record takes it; offset_text as OSIRIS.record_text's.
function OSIRIS.lone_data_record(holder, tvb, data, i, record_pos, size, offset, entry_index, data_field,
    size_range, offset_text)
  local add = TI.add
  local child, whole = OSIRIS.record(holder, tvb, record_pos, size, offset, entry_index, size_range)
  add(child, F.sections, whole, 0x75)
  -- the binary's bytes, after its a0 or b0 constructor and size (AMQPV.section's)
  local start = record_pos + (string.byte(data, i + 3) == 0xa0 and 5 or 8)
  add(add(child, F.message, whole), data_field, tvb(start, record_pos + size - start))
  OSIRIS.record_text(child, offset, size, ", AMQP 1.0", offset_text)
end

local function show_record(holder, btvb, pos, len, offset, entry_index, tracking, snapshot, ctx)
  local child, whole
  local add = TI.add
  if holder then child, whole = OSIRIS.record(holder, btvb, pos, len, offset, entry_index) end
  local kind = ""
  if tracking then
    decode_tracking(btvb, pos, len, child, ctx, snapshot, F.tracking)
  else
    local amqp, bytes = amqp_looks_like(btvb, pos, len)
    if amqp then
      local sections, err = amqp_sections(bytes, pos, len)
      if child then
        for i = 1, #sections do
          local s = sections[i]
          add(child, F.sections, btvb(s.pos, s.len), s.code)
        end
        AMQPV.show(add(child, F.message, whole), btvb, sections, AMQPV.record_message)
      end
      if err then note(ctx, "warn", "malformed", "AMQP 1.0 message: " .. err) end
      AMQPV.order_notes(sections, err, ctx)
      AMQPV.content_notes(btvb, sections, ctx)
      kind = ", AMQP 1.0"
    else
      if child then add(child, F.bytes, btvb(pos, len)) end
      kind = ", not AMQP 1.0"
    end
  end
  if child then OSIRIS.record_text(child, offset, len, kind) end
end

-- A simple entry's one record (the entry after its 4-byte size), within the frame's budget;
-- index: its entry's, in a chunk; message: its Publish message's id.
local function show_simple_record(holder, tvb, entry, offset, index, message, tracking, snapshot, ctx)
  if take_record(ctx, index, message, 1) then
    show_record(holder, tvb, entry.pos + 4, entry.size - 4, offset, index, tracking, snapshot, ctx)
  end
end

-- bodies_by_entry: each entry's records as entry_bodies gives them, or a simple entry itself
-- (read_entry's, kind 0): its one record, in tvb, with no list of it (a chunk holds hundreds).
local function show_records(tree, tvb, bodies_by_entry, first_offsets, ctx, tracking, snapshot, index_of)
  local total = 0
  for e = 1, #bodies_by_entry do
    local bodies = bodies_by_entry[e]
    total = total + (bodies.kind == 0 and 1 or #bodies)
  end
  local holder = tree
  if tree and index_of then holder = tree:add(tvb(0, 0), "Records: " .. total) end
  for e = 1, #bodies_by_entry do
    local bodies = bodies_by_entry[e]
    if bodies.kind == 0 then
      show_simple_record(holder, tvb, bodies, first_offsets and first_offsets[e], index_of and index_of[e], nil,
        tracking, snapshot, ctx)
    else
      for i = 1, #bodies do
        local body = bodies[i]
        if not take_record(ctx, bodies.index, bodies.message, #bodies - i + 1) then break end
        -- (a UInt64: adding 0, a sub-batch's first record, would make another)
        local offset = first_offsets and (i == 1 and first_offsets[e] or first_offsets[e] + (i - 1))
        show_record(holder, body.tvb, body.pos, body.len, offset, index_of and index_of[e], tracking, snapshot, ctx)
      end
    end
  end
end

HOOKS.osiris_entry = {
  min_size = 4,
  -- Without a tree (lite): the entry at byte i of s is stepped over, its records left unread;
  -- nil where the entry does not fit (read then tells why).
  -- (string.byte as an upvalue: a million entries each skip a method lookup)
  skip = (function(byte) return function(s, i, n)
    local left = n - i + 1
    if left < 4 then return nil end
    local a, b, c, d = byte(s, i, i + 3)
    if a < 0x80 then
      local size = ((a * 256 + b) * 256 + c) * 256 + d
      if left - 4 < size then return nil end
      return true, i + 4 + size
    end
    if left < 11 then return nil end
    a, b, c, d = byte(s, i + 7, i + 10)
    local length = ((a * 256 + b) * 256 + c) * 256 + d
    if length > 0x7FFFFFFF or left - 11 < length then return nil end
    return true, i + 11 + length
  end end)(string.byte),
  -- The same step as Lua source, which the lite loop of an array (LITE.compile) pastes in, so a
  -- Publish frame's hundreds of entries cost no call each: it reads s at `at` (n bytes in all)
  -- and sets VALUE and AFTER, or runs FAIL where the entry does not fit. HEAD32 is its first
  -- four bytes as a big-endian uint32 (skip_head), which the loop reads once it has found them
  -- there, with the integers before it where it can (one call).
  skip_head = 4,
  skip_source = [[
      if HEAD32 < 2147483648 then
        if n - at - 3 < HEAD32 then FAIL end
        VALUE, AFTER = true, at + 4 + HEAD32
      else
        if n - at + 1 < 11 then FAIL end
        local a, b, c, d = byte(s, at + 7, at + 10)
        local length = ((a * 256 + b) * 256 + c) * 256 + d
        if length > 2147483647 or n - at - 10 < length then FAIL end
        VALUE, AFTER = true, at + 11 + length
      end
]],
  read = function(spec, tvb, pos, stop, tree, ctx, name, siblings)
    local entry = read_entry(tvb, pos, stop, name)
    local after = entry.pos + entry.size
    if ctx.lite then
      return entry, after
    end
    local whole = tree and tvb(entry.pos, entry.size)  -- one TvbRange for the entry's items
    local item = show_entry(tree, tvb, entry, F[name], struct_title(name), whole)
    if entry.kind == 0 then
      -- A simple entry, the message most clients publish: its one record, with no list of it.
      local holder = tree and TI.add(tree, whole, "Records: 1")
      show_simple_record(holder, tvb, entry, nil, nil, siblings.publishing_id, false, false, ctx)
      return entry, after
    end
    -- a sub-batch: its records, each told by the message's id where a note says it
    local bodies = entry_bodies(tvb, entry, "message " .. tostring(siblings.publishing_id), ctx)
    bodies.message = siblings.publishing_id
    if item and entry.framing then item:add(F.framing, whole, entry.framing) end
    local holder = nil
    if tree then holder = tree:add(whole, "Records: " .. #bodies) end
    show_records(holder, tvb, { bodies }, nil, ctx, false, false, nil)
    return entry, after
  end,
}

-- A Publish's leading messages that the general reader would show with no note (LITE.shown): at
-- version 1, each a publishing id a number holds exactly and a simple entry whose record is one
-- AMQP 1.0 message of one data section (what most publishers send), within the records budget.
-- Shown and stored as the general reader would, from one copy: no pcall, walk or copy a message.
LITE.shown.published_message = function(holder, tvb, pos, limit, count, items, version, ctx, name)
  local data_field = OSIRIS.data_field()
  local n = limit - pos  -- (a plain message is 17 bytes at least: id, size, 00 53 75 a0 00)
  if version ~= 1 or count == nil or n < 17 or data_field == nil then return 0, pos end
  local budget = budget_of(ctx)
  local byte, lone_data, int_at = string.byte, AMQP_WALK.lone_data, LITE.int_at
  -- (a frame whose first message is of another shape, a sub-batch of a megabyte, is not copied)
  local simple, _, _, _, zero, small, code = byte(tvb:raw(pos + 8, 7), 1, 7)
  if simple >= 0x80 or zero ~= 0 or small ~= 0x53 or code ~= 0x75 then return 0, pos end
  local data = tvb:raw(pos, n)
  local most, plain, at = math.min(count, budget.records), 0, 1
  while plain < most and at + 11 <= n do
    local a, b, c, d = byte(data, at + 8, at + 11)
    if a >= 0x80 then break end  -- a sub-batch
    local size = ((a * 256 + b) * 256 + c) * 256 + d
    if size < 5 or at + 11 + size > n or int_at(data, at, 8, "uint64") == nil
        or not lone_data(data, at + 12, size) then break end
    plain, at = plain + 1, at + 12 + size
  end
  if plain == 0 then return 0, pos end
  budget.records = budget.records - plain
  local add, set_text, set_len = TI.add, TI.set_text, TI.set_len
  local simple_entry, lone_data_record = OSIRIS.simple_entry, OSIRIS.lone_data_record
  local field, title = F[name], struct_title("published_message")
  local titles = OSIRIS.texts[title .. " [%d]"]
  at = 1
  for index = 0, plain - 1 do
    local a, b, c, d = byte(data, at + 8, at + 11)
    local size = ((a * 256 + b) * 256 + c) * 256 + d
    local p = pos + at - 1
    local entry_pos, record_pos = p + 8, p + 12
    -- (made empty and then stretched, as the general reader makes a struct's item)
    local child = add(holder, field, tvb(p, 0))
    set_text(child, titles[index] or OSIRIS.text(titles, index, "%s [%d]", title, index))
    add(child, F.publishing_id, tvb(p, 8))
    -- the entry's length field is its record's: one TvbRange for both size items
    local whole, length = tvb(entry_pos, 4 + size), tvb(entry_pos, 4)
    simple_entry(child, tvb, entry_pos, 4 + size, F.entry, "Entry", nil, whole, length)
    lone_data_record(add(child, whole, "Records: 1"), tvb, data, at + 12, record_pos, size, nil, nil, data_field,
      length)
    set_len(child, 12 + size)
    items[#items + 1] = {
      publishing_id = int_at(data, at, 8, "uint64"),
      entry = { kind = 0, size = 4 + size, pos = entry_pos, record_count = 1 },
    }
    at = at + 12 + size
  end
  return plain, pos + at - 1
end

-- A chunk the general path below would show with no note: user data, every entry simple and its
-- record one AMQP 1.0 message of one data section (what a consumer of plain messages receives,
-- hundreds a chunk), with as many records as the header declares, no byte after the last entry,
-- and the frame's records budget taking them all. data: the chunk's data (one copy).
function OSIRIS.plain_chunk(data, len, num_entries, declared, ctx)
  if num_entries ~= declared or budget_of(ctx).records < num_entries then return false end
  local byte, lone_data, at = string.byte, AMQP_WALK.lone_data, 1
  for _ = 1, num_entries do
    if at + 3 > len then return false end
    local a, b, c, d = byte(data, at, at + 3)
    if a >= 0x80 then return false end  -- a sub-batch
    local size = ((a * 256 + b) * 256 + c) * 256 + d
    local first = at + 4
    if size < 5 or first + size - 1 > len or not lone_data(data, first, size) then return false end
    at = first + size
  end
  return at == len + 1
end

-- The items the general path gives a plain chunk (read_entry, show_entry and show_records over
-- its entries, AMQPV.show over each one-section message), read from the one copy that
-- OSIRIS.plain_chunk checked: no table, pcall or copy per entry or record. data_field: the data
-- section's field. number_id: the chunk id where a number holds it.
function OSIRIS.show_plain_chunk(tree, tvb, pos, len, data, num_entries, chunk_id, data_field, ctx, number_id)
  local add, byte = TI.add, string.byte
  local simple_entry, lone_data_record, offset_text = OSIRIS.simple_entry, OSIRIS.lone_data_record, OSIRIS.offset_text
  local heads = { n = 0 }
  -- Both holders first, then each entry's item and its record's in one pass: the two subtrees
  -- read as the general path's do, and an entry's length field is read and made a TvbRange once
  -- for its size item and its record's.
  local holder = add(tree, tvb(pos, len), "Entries: " .. num_entries)
  local records = add(tree, tvb(0, 0), "Records: " .. num_entries)
  local budget = budget_of(ctx)
  budget.records = budget.records - num_entries
  local at = 1
  for index = 0, num_entries - 1 do
    local a, b, c, d = byte(data, at, at + 3)
    local size = ((a * 256 + b) * 256 + c) * 256 + d
    local entry_pos = pos + at - 1
    local length = tvb(entry_pos, 4)
    simple_entry(holder, tvb, entry_pos, 4 + size, F.entries, "Entry", index, nil, length)
    lone_data_record(records, tvb, data, at + 4, entry_pos + 4, size, chunk_id + index, index, data_field, length,
      number_id and offset_text(number_id, index, heads))
    at = at + 4 + size
  end
end

HOOKS.osiris_chunk = {
  raw = function(spec, tvb, pos, len, tree, ctx, siblings)
    local magic = siblings.magic_version
    if type(magic) == "number" and math.floor(magic / 16) ~= 5 then
      note(ctx, "error", "malformed", string.format("not an Osiris chunk: magic/version byte is 0x%02x", magic))
    end
    local chunk_type = siblings.chunk_type
    if VS.chunk_type[chunk_type] == nil then
      note(ctx, "warn", "malformed", "unknown chunk type " .. tostring(chunk_type))
    end
    -- Without a tree (lite) the data is not read: its CRC (tens of ns a byte in Lua, most of a
    -- first pass), entries and records are checked when the packet's tree is built.
    if ctx.lite then return end
    -- A user chunk's data is copied once, for its CRC and its entries alike.
    local data = tree and chunk_type == 0 and len > 0 and tvb:raw(pos, len) or nil
    if P.prefs.check_crc then
      local actual = crc32(tvb, pos, len, data)
      local crc = siblings.crc
      if tree then tree:add(F.crc_valid, tvb(pos, len), crc == actual):set_generated() end  -- worked out over the data
      if crc ~= actual then
        note(ctx, "error", "malformed", string.format(
          "chunk CRC mismatch: header says 0x%08x, data gives 0x%08x", crc, actual))
      end
    end
    -- A UInt64 (a number where a double holds it, as 64-bit values are read): the records'
    -- offsets are counted from it, and a uint64 field's item takes a UInt64.
    local chunk_id = siblings.chunk_id or 0
    local number_id = type(chunk_id) == "number" and chunk_id
    if number_id then chunk_id = UInt64.new(chunk_id) end
    local num_entries = siblings.num_entries or 0
    local data_field = data and OSIRIS.data_field()
    if data_field and OSIRIS.plain_chunk(data, len, num_entries, siblings.num_records, ctx) then
      OSIRIS.show_plain_chunk(tree, tvb, pos, len, data, num_entries, chunk_id, data_field, ctx, number_id)
      return
    end
    local tracking = chunk_type == 1 or chunk_type == 2
    local holder = nil
    if tree then holder = tree:add(tvb(pos, len), "Entries: " .. num_entries) end
    local bodies_by_entry, first_offsets, index_of = {}, {}, {}
    local counted, at, stop, read = 0, pos, pos + len, 0
    for index = 0, num_entries - 1 do
      if at >= stop then
        note(ctx, "error", "malformed", string.format("chunk declares %d entries but its data holds %d",
          num_entries, index))
        break
      end
      local ok, entry = pcall(read_entry, tvb, at, stop, "entry", pos, index)
      if not ok then
        if type(entry) ~= "table" then error(entry, 0) end
        local what = entry.short and short_message(entry) or entry.text
        note(ctx, "error", "malformed", "entry " .. index .. ": " .. what)
        break
      end
      -- where a note says it: "entry 7", made only for one
      local bodies = entry
      if entry.kind ~= 0 then
        bodies = entry_bodies(tvb, entry, entry_named("entry", index), ctx)
        bodies.index = index
      end
      local item = show_entry(holder, tvb, entry, F.entries, "Entry", nil, index)
      if item and entry.framing then
        item:add(F.framing, tvb(entry.pos, entry.size), entry.framing)
        item:append_text(", " .. entry.framing)
      end
      bodies_by_entry[#bodies_by_entry + 1] = bodies
      first_offsets[#first_offsets + 1] = chunk_id + counted
      index_of[#index_of + 1] = index
      counted = counted + entry.record_count
      at = entry.pos + entry.size
      read = read + 1
    end
    if at < stop and read == num_entries then
      note(ctx, "warn", "malformed", (stop - at) .. " bytes after the chunk's last entry")
    end
    local declared = siblings.num_records or 0
    if counted ~= declared and read == num_entries then
      note(ctx, "warn", "malformed", string.format("chunk declares %d records but its entries hold %d",
        declared, counted))
    end
    show_records(tree, tvb, bodies_by_entry, first_offsets, ctx, tracking, chunk_type == 2, index_of)
  end,
}

HOOKS.osiris_trailer = {
  raw = function(spec, tvb, pos, len, tree, ctx, siblings)
    if tree then tree:add(F[spec.name], tvb(pos, len)) end
    local holder = nil
    if tree then holder = tree:add(tvb(pos, len), "Trailer tracking") end
    local items = decode_tracking(tvb, pos, len, holder, ctx, false, F.trailer_tracking)
    if holder then holder:set_text("Trailer tracking: " .. #items) end
  end,
}
