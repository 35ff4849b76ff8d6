-- The user name of a PLAIN authentication ("\0user\0password"); never the password.
-- Lua twin of dissectors/rabbitmq_stream/sasl.py.
CONV_HOOKS.user = function(fields)
  if fields.mechanism ~= "PLAIN" then return nil end
  local data = fields.sasl_opaque_data
  if type(data) ~= "table" or data.pos == nil or data.len == 0 then return nil end
  local raw = data.tvb:raw(data.pos, data.len)
  return raw:match("^[^%z]*%z([^%z]*)%z[^%z]*$")
end
