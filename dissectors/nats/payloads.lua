-- Lua twin of dissectors/nats/payloads.py: the headers of HPUB and HMSG (the NATS/1.0 line
-- with its status, the Name: value lines, and the payload's size: the total less them), and
-- what a payload holds (JSON, text, and the parts of a JetStream acknowledgement subject).

local NATS_VERSION_LINE = "NATS/1.0"
local NATS_ACK_PREFIX = "$JS.ACK."
local NATS_ACK_NUMBERS = { "js_delivered", "js_stream_seq", "js_consumer_seq", "js_timestamp", "js_pending" }

local function nats_add(tree, name, range, value)
  if tree and value ~= nil then
    local v = value
    if name == "js_delivered" or name == "js_stream_seq" or name == "js_consumer_seq" or name == "js_pending" then
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

-- A JetStream API answer that says it failed: its code and the server's words.
local function nats_api_error(raw, out, item, range, ctx)
  if not utf8_valid(raw) then return end
  local ok, answer = pcall(json_parse, raw)
  if not ok or getmetatable(answer) ~= JSON_OBJECT then return end
  local err = answer.map.error
  if getmetatable(err) ~= JSON_OBJECT or type(err.map.code) ~= "number" then return end
  local code, description, detail = err.map.code, err.map.description, err.map.err_code
  out.js_error_code = code
  if type(description) == "string" then out.js_error = description end
  if item then
    item:add(F.js_error_code, range, code):set_generated()
    if out.js_error then item:add(F.js_error, range, out.js_error):set_generated() end
  end
  local which = type(detail) == "number" and string.format(" (%d)", detail) or ""
  local said = type(description) == "string" and (": " .. description) or ""
  note(ctx, "warn", "api_error", string.format("JetStream API error %d%s%s", code, which, said))
end

local function nats_printable(text)
  -- Python's str.isprintable, with CR, LF and tab allowed: no control characters.
  return not text:find("[%z\1-\8\11\12\14-\31\127]")
end

HOOKS.payload = {
  raw = function(spec, tvb, pos, len, tree, ctx, out)
    local item = tree and tree:add(F[spec.name], tvb(pos, len)) or nil
    local range = tvb(pos, len)
    local reply = out.reply_to
    if type(reply) == "string" and reply:sub(1, #NATS_ACK_PREFIX) == NATS_ACK_PREFIX and nats_ack_parts(reply, out) then
      for _, name in ipairs({ "js_stream", "js_consumer", "js_delivered", "js_stream_seq", "js_consumer_seq", "js_pending" }) do
        nats_add(item, name, range, out[name])
      end
    end
    local head = len > 0 and tvb:raw(pos, math.min(len, 64)) or ""
    if head:find('"io.nats.jetstream.api.', 1, true) and tvb:raw(pos, len):find('"error"', 1, true) then
      nats_api_error(tvb:raw(pos, len), out, item, range, ctx)
    end
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
