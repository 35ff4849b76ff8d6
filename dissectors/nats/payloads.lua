-- Lua twin of dissectors/nats/payloads.py: the headers of HPUB and HMSG (the NATS/1.0 line
-- with its status, the Name: value lines, and the payload's size: the total less them), and
-- what a payload holds (JSON, text, and the parts of a JetStream acknowledgement subject).

local NATS_VERSION_LINE = "NATS/1.0"
local NATS_ACK_PREFIX = "$JS.ACK."
local NATS_ACK_NUMBERS = { "js_delivered", "js_stream_seq", "js_consumer_seq", "js_timestamp", "js_pending" }

local NATS_UINT64 = {
  js_delivered = true, js_stream_seq = true, js_consumer_seq = true, js_pending = true,
  kv_revision = true, obj_size = true,
}
-- What the payload hook reads on every decode, in the order the tree shows it (payloads.py's SHOWN).
local NATS_SHOWN = {
  "js_api", "js_stream", "js_consumer", "js_subject", "js_filter", "js_delivered", "js_stream_seq",
  "js_consumer_seq", "js_pending", "js_ack", "js_duplicate", "js_error_code", "js_err_code", "js_error",
  "kv_bucket", "kv_key", "kv_operation", "kv_revision", "obj_bucket", "obj_nuid", "obj_name", "obj_size",
  "obj_chunks", "obj_digest", "srv_verb", "srv_name", "srv_id",
}
local NATS_HEADS = {}
for _, entry in ipairs((SPEC.hook_names.payload or { patterns = {} }).patterns) do
  NATS_HEADS[entry.pattern:match("^[^.]*")] = true
end

local function nats_add(tree, name, range, value)
  if tree and value ~= nil then
    local v = value
    if NATS_UINT64[name] then
      v = UInt64.new(value)
    end
    tree:add(F[name], range, v):set_generated()
  end
end

HOOKS.header_block = {
  raw = function(spec, tvb, pos, len, tree, ctx, out)
    local item = tree and tree:add(F[spec.name], tvb(pos, len)) or nil
    local range = tvb(pos, len)
    local total, size = out.total_size, out.header_size
    if type(total) == "number" and type(size) == "number" then
      if size > total then
        note(ctx, "error", "malformed", string.format("header size %d is larger than the total size %d", size, total))
      else
        out.payload_size = total - size
      end
    end
    local raw = len > 0 and tvb:raw(pos, len) or ""
    if raw == "" then  -- a header block of size 0 is valid (nats.js 3.x)
      if item and out.payload_size then item:add(F.payload_size, range, out.payload_size):set_generated() end
      return
    end
    local text = raw
    if not utf8_valid(raw) then
      note(ctx, "warn", "malformed", "headers are not valid UTF-8")
      text = py_utf8(raw)
    end
    local lines = {}
    local from = 1
    while true do
      local i = text:find("\r\n", from, true)
      if not i then lines[#lines + 1] = text:sub(from) break end
      lines[#lines + 1] = text:sub(from, i - 1)
      from = i + 2
    end
    local first = lines[1]
    if first:sub(1, #NATS_VERSION_LINE) ~= NATS_VERSION_LINE then
      note(ctx, "warn", "malformed", "headers do not start with " .. NATS_VERSION_LINE .. ": " .. py_repr(first:sub(1, 40)))
    else
      local rest = first:sub(#NATS_VERSION_LINE + 1):match("^[ \t]*(.-)[ \t]*$")
      local code, description = rest:match("^([^ ]*) ?(.*)$")
      if code and code:match("^[0-9][0-9][0-9]$") then  -- statuses are three digits
        out.status = tonumber(code)
        local d = description:match("^[ \t]*(.-)[ \t]*$")
        if d ~= "" then out.status_text = d end
      end
    end
    if #raw > 0 and raw:sub(-4) ~= "\r\n\r\n" then
      note(ctx, "warn", "malformed", "headers do not end with an empty line (CRLF CRLF)")
    end
    local names, values = {}, {}
    for i = 2, #lines do
      local line = lines[i]
      if line ~= "" then
        local colon = line:find(":", 1, true)
        if not colon then
          note(ctx, "warn", "malformed", "header line without a colon: " .. py_repr(line:sub(1, 40)))
        else
          local name = line:sub(1, colon - 1):match("^[ \t]*(.-)[ \t]*$")
          local value = line:sub(colon + 1):match("^[ \t]*(.-)[ \t]*$")
          if values[name] then values[name] = values[name] .. ", " .. value
          else names[#names + 1] = name values[name] = value end
        end
      end
    end
    if #names > 0 then
      local map = setmetatable({ keys = names, map = values }, JSON_OBJECT)
      out.message_headers = map
      local words, code = values["Nats-Service-Error"], values["Nats-Service-Error-Code"] or ""
      if words ~= nil or code ~= "" then
        out.service_error = words
        if code:match("^[0-9]+$") and #code < 10 then out.service_error_code = tonumber(code) end
        if out.sid ~= nil then
          note(ctx, "warn", "header_error", "service error " .. (code ~= "" and code or "(no code)")
            .. (words and words ~= "" and (": " .. words) or ""))
        end
      end
    end
    if item then
      if out.payload_size then item:add(F.payload_size, range, out.payload_size):set_generated() end
      nats_add(item, "status", range, out.status)
      nats_add(item, "status_text", range, out.status_text)
      if #names > 0 then
        local holder = item:add(F.message_headers, range)
        holder:set_text("Message Headers: " .. #names .. " headers")
        for _, name in ipairs(names) do
          local entry = holder:add(range, name .. ": " .. values[name])
          entry:add(F["message_headers.key"], range, name)
          entry:add(F["message_headers.value"], range, values[name])
        end
      end
      nats_add(item, "service_error", range, out.service_error)
      nats_add(item, "service_error_code", range, out.service_error_code)
    end
  end,
}

local function nats_ack_parts(reply, out)
  local tokens = {}
  for t in (reply:sub(#NATS_ACK_PREFIX + 1) .. "."):gmatch("([^.]*)%.") do tokens[#tokens + 1] = t end
  local first = 1
  if #tokens >= 9 then first = 3 end
  if #tokens - first + 1 < 7 then return false end
  for i = first + 2, first + 6 do
    if not tokens[i]:match("^[0-9]+$") then return false end
  end
  out.js_stream, out.js_consumer = tokens[first], tokens[first + 1]
  for k, name in ipairs(NATS_ACK_NUMBERS) do
    if name ~= "js_timestamp" then out[name] = tonumber(tokens[first + 1 + k]) end
  end
  return true
end

-- A JetStream answer: an error wherever it lands (a warning), or a publish ack (a duplicate noted).
local function nats_answer(raw, out, ctx)
  if not utf8_valid(raw) then return end
  local ok, found = pcall(json_parse, raw)
  if not ok or getmetatable(found) ~= JSON_OBJECT then return end
  local err = found.map.error
  if getmetatable(err) == JSON_OBJECT and type(err.map.code) == "number" then
    local code, description, detail = err.map.code, err.map.description, err.map.err_code
    out.js_error_code = code
    if type(detail) == "number" then out.js_err_code = detail end
    if type(description) == "string" then out.js_error = description end
    local which = type(detail) == "number" and string.format(" (%d)", detail) or ""
    local said = type(description) == "string" and (": " .. description) or ""
    note(ctx, "warn", "api_error", string.format("JetStream error %d%s%s", code, which, said))
    return
  end
  local stream, seq = found.map.stream, found.map.seq
  if found.map.type ~= nil or type(stream) ~= "string" or type(seq) ~= "number" then return end
  out.js_stream, out.js_stream_seq = stream, seq
  if found.map.duplicate == true then
    out.js_duplicate = true
    note(ctx, "note", "duplicate", string.format(
      "duplicate publish: %s already had this Nats-Msg-Id (sequence %d); not stored again", stream, seq))
  end
end

-- Twin of payloads.object_name: base64 URL, padded or not; the token itself when not that.
local NATS_B64 = {}
do
  local alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
  for i = 1, 64 do NATS_B64[alphabet:sub(i, i)] = i - 1 end
end
local function nats_object_name(encoded)
  local body, pad = encoded:match("^([A-Za-z0-9_%-]*)(=?=?)$")
  if body == nil or #body % 4 == 1 or (pad ~= "" and #encoded % 4 ~= 0) then return encoded end
  local bytes, acc, bits = {}, 0, 0
  for i = 1, #body do
    local v = NATS_B64[body:sub(i, i)]
    if v == nil then return encoded end
    acc, bits = acc * 64 + v, bits + 6
    if bits >= 8 then
      bits = bits - 8
      local p = 2 ^ bits
      bytes[#bytes + 1] = string.char(math.floor(acc / p))
      acc = acc % p
    end
  end
  local text = table.concat(bytes)
  if not utf8_valid(text) then return encoded end
  return text
end

local function nats_object_meta(raw, out)
  if not utf8_valid(raw) then return end
  local ok, meta = pcall(json_parse, raw)
  if not ok or getmetatable(meta) ~= JSON_OBJECT then return end
  local m = meta.map
  if type(m.nuid) == "string" then out.obj_nuid = m.nuid end
  if type(m.size) == "number" and m.size >= 0 and m.size == math.floor(m.size) then out.obj_size = m.size end
  if type(m.chunks) == "number" and m.chunks >= 0 and m.chunks == math.floor(m.chunks) then out.obj_chunks = m.chunks end
  if type(m.digest) == "string" then out.obj_digest = m.digest end
end

-- What the payload hook reads on every decode (payloads.py's Payload.check).
local function nats_check(tvb, pos, len, out, ctx)
  local subject = out.subject
  local headers = out.message_headers and out.message_headers.map or {}
  if type(subject) == "string" and NATS_HEADS[subject:match("^[^.]*")] then
    local named = hook_names("payload", subject)
    if named.obj_name then named.obj_name = nats_object_name(named.obj_name) end
    for k, v in pairs(named) do out[k] = v end
  elseif headers["Nats-Subject"] and out.sid ~= nil then
    local origin = hook_names("payload", headers["Nats-Subject"])
    for k, v in pairs(origin) do
      if k:sub(1, 3) == "kv_" or k:sub(1, 4) == "obj_" then out[k] = v end
    end
    if out.kv_key then
      local revision = headers["Nats-Sequence"] or ""
      if revision:match("^[0-9]+$") then out.kv_revision = tonumber(revision) end
    end
  end
  local reply = out.reply_to
  if type(reply) == "string" and reply:sub(1, #NATS_ACK_PREFIX) == NATS_ACK_PREFIX then nats_ack_parts(reply, out) end
  if out.kv_key then
    local operation = headers["KV-Operation"]
    out.kv_operation = type(operation) == "string" and operation:upper() or "PUT"
    if out.js_stream_seq ~= nil and out.kv_revision == nil then out.kv_revision = out.js_stream_seq end
  end
  if type(subject) == "string" and subject:sub(1, #NATS_ACK_PREFIX) == NATS_ACK_PREFIX and out.sid == nil then
    local head = len > 0 and tvb:raw(pos, math.min(len, 16)) or ""
    out.js_ack = head:match("^[ \t\r\n\v\f]*([^ \t\r\n\v\f]+)") or "+ACK"
  end
  local head = len > 0 and tvb:raw(pos, math.min(len, 64)) or ""
  local answers = head:sub(1, 9) == '{"error":' or head:sub(1, 10) == '{"stream":'
  if head:find('"io.nats.jetstream.api.', 1, true) or (out.sid ~= nil and (reply == nil or reply == "") and answers) then
    nats_answer(tvb:raw(pos, len), out, ctx)
  elseif out.obj_name and head:sub(1, 1) == "{" and len <= 65536 then
    nats_object_meta(tvb:raw(pos, len), out)
  end
end

local function nats_printable(text)
  -- Python's str.isprintable, with CR, LF and tab allowed: no control characters.
  return not text:find("[%z\1-\8\11\12\14-\31\127]")
end

HOOKS.payload = {
  raw = function(spec, tvb, pos, len, tree, ctx, out)
    local item = tree and tree:add(F[spec.name], tvb(pos, len)) or nil
    local range = tvb(pos, len)
    nats_check(tvb, pos, len, out, ctx)
    for _, name in ipairs(NATS_SHOWN) do nats_add(item, name, range, out[name]) end
    if carried(spec, tvb, pos, len, tree, ctx, out) then return end
    if len == 0 then return end
    local raw = tvb:raw(pos, len)
    if not utf8_valid(raw) then return end
    local first = raw:match("^[ \t\r\n]*(.)")
    if first == "{" or first == "[" then
      local ok, parsed = pcall(json_parse, raw)
      if ok then
        out.data_json = parsed
        if item then
          local shown = item:add(F.data_json, range)
          shown:set_text("Data Json")
          shown:set_generated()
          json_tree(shown, parsed, range, "JSON")
        end
        return
      end
    end
    if nats_printable(raw) then
      out.data_text = raw
      nats_add(item, "data_text", range, raw)
    end
  end,
}
