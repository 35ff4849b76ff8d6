-- The user name of a PLAIN authentication ("\0user\0password"); never the password,
-- which the sasl_plain hook shows masked. Lua twin of dissectors/rabbitmq_stream/sasl.py.

HOOKS.sasl_plain = {
  shows = true,  -- the hook adds the field's item itself
  value = function(spec, value, tree, ctx, out, tvb, at, len)
    if tree == nil or type(value) ~= "table" or value.pos == nil then return end
    local raw = value.len > 0 and value.tvb:raw(value.pos, value.len) or ""
    local authz, user, password = raw:match("^([^%z]*)%z([^%z]*)%z([^%z]*)$")
    if out.mechanism == "PLAIN" and password ~= nil and password ~= "" then
      raw = authz .. "\0" .. user .. "\0" .. string.rep("*", #password)
    end
    tree:add(F[spec.name], value.tvb(value.pos, value.len), raw)
  end,
}
-- Twin of sasl.py's Authentication rule: who authenticates, and the broker refusing them.
do
  local spec = CONV.rules.authenticate
  local function user_of(fields)
    if fields.mechanism ~= "PLAIN" then return nil end
    local data = fields.sasl_opaque_data
    if type(data) ~= "table" or data.pos == nil or data.len == 0 then return nil end
    local raw = data.tvb:raw(data.pos, data.len)
    return raw:match("^[^%z]*%z([^%z]*)%z[^%z]*$")
  end
  if spec then
    CONV_RULES.authenticate = {
      feed = function(conn, f)
        if f.command == spec.command and f.kind == "request" then conn.rules.user = user_of(f.fields) end
      end,
      status = function(conn, f, request, code, what)
        if f.command ~= spec.command then return false end
        local how = ""
        if request then
          local user = conn.rules.user and (", user " .. quoted(conn.rules.user)) or ""
          how = string.format(" (%s%s, packet %d)", tostring(request.fields.mechanism), user, request.number)
        end
        tnote(f, "error", "auth_failure",
          "authentication failed: the " .. server_of(conn) .. " answered " .. f.command .. how .. " with " .. what)
        return true
      end,
    }
  end
end
