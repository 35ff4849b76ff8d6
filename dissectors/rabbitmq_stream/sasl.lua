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
CONV_HOOKS.user = function(fields)
  if fields.mechanism ~= "PLAIN" then return nil end
  local data = fields.sasl_opaque_data
  if type(data) ~= "table" or data.pos == nil or data.len == 0 then return nil end
  local raw = data.tvb:raw(data.pos, data.len)
  return raw:match("^[^%z]*%z([^%z]*)%z[^%z]*$")
end
