-- Lua twin of dissectors/eventmesh/packages.py: which convention a frame's message length
-- follows (8 + header + body up to 1.8, 13 + header + body from 1.9), and what a message
-- package holds (a CloudEvent or an EventMeshMessage; its topic, id, content type, and
-- its content as JSON, text or bytes).

local EM_LENGTH_AT = #EM_MAGIC  -- framing.lua, loaded first, has the magic and the conventions

HOOKS.length_convention = {
  min_size = 0,
  read = function(spec, tvb, pos, stop, tree, ctx, name, siblings)
    if int(tvb:len()) < EM_LENGTH_AT + 4 then return nil, pos end
    local length = tvb(EM_LENGTH_AT, 4):int()
    local size = int(tvb:reported_len())
    local value = nil
    for _, c in ipairs(EM_CONVENTIONS) do
      if length + c[1] == size then value = c[2] end
    end
    if value == nil then
      if int(tvb:len()) < size then return nil, pos end  -- the frame's end is not in the capture
      note(ctx, "error", "malformed", string.format(
        "message length %d fits neither convention for a %d-byte frame: %d (8 + header + body, up to 1.8) "
          .. "or %d (13 + header + body, 1.9 and later)", length, size, size - 13, size - 8))
      value = "neither"
    end
    if tree then tree:add(F[name], tvb(EM_LENGTH_AT, 4), value):set_generated() end
    siblings[name] = value
    return value, pos
  end,
}

local function em_unwrap(value)
  if type(value) == "string" and value:sub(1, 1) == "{" then
    local ok, parsed = pcall(json_parse, value)
    if ok then return parsed end
  end
  return value
end

-- The content as JSON where it parses, as text where it is text, else as bytes.
local function em_content(raw)
  if not utf8_valid(raw) then return "content_bytes", raw end
  local ok, parsed = pcall(json_parse, raw)
  if ok then return "content", parsed end
  return "content_text", raw
end

local function em_add(tree, name, range, value)
  if tree == nil or value == nil then return end
  if name == "content" then
    local item = tree:add(F.content, range)
    item:set_text("Content")
    item:set_generated()
    json_tree(item, value, range, "JSON")
  elseif name == "content_bytes" then
    -- The decoded bytes are a data source of their own, as Wireshark shows inflated data.
    local decoded = ByteArray.new(value, true):tvb("Content")
    tree:add(F.content_bytes, decoded()):set_generated()
  else
    tree:add(F[name], range, value):set_generated()
  end
end

HOOKS.message_package = {
  value = function(spec, value, tree, ctx, out, tvb, at, len)
    local package = em_unwrap(value)
    if getmetatable(package) ~= JSON_OBJECT then return end
    local map = package.map
    local range = tvb(at, len)
    local topic = map.subject
    if topic == nil then topic = map.topic end
    if type(topic) == "string" then out.topic = topic end
    if type(map.id) == "string" and map.specversion ~= nil then out.event_id = map.id end
    local content_type = map.datacontenttype
    if (content_type == nil or content_type == JSON_NULL) and getmetatable(map.headers) == JSON_OBJECT then
      content_type = map.headers.map.datacontenttype
    end
    if type(content_type) == "string" then out.content_type = content_type end
    for _, name in ipairs({ "topic", "event_id", "content_type" }) do em_add(tree, name, range, out[name]) end
    local name, content
    if map.data_base64 ~= nil then
      local text = map.data_base64
      if type(text) ~= "string" or #text % 4 ~= 0 or not text:match("^[A-Za-z0-9+/]*=?=?$") then
        note(ctx, "warn", "malformed", "package: data_base64 is not base64")
        return
      end
      name, content = em_content(ByteArray.new(text, true):base64_decode():raw())
    elseif map.data ~= nil and map.specversion ~= nil then
      name, content = "content", map.data
    elseif type(map.body) == "string" then
      name, content = em_content(map.body)
    else
      return
    end
    out[name] = content
    em_add(tree, name, range, content)
  end,
}
