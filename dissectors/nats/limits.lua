-- Twin of limits.py: a value the server announces (INFO's max_payload) that bounds the client's
-- later frames; a frame over it is an error.
do
  local spec = CONV.rules.limits
  if spec then
    CONV_RULES.limits = {
      before = function(conn, f)
        local found = conn.rules.limits
        if found == nil then found = {}; conn.rules.limits = found end
        if not f.from_client then
          for i, limit in ipairs(spec) do
            if f.command == limit.command and is_number(f.fields[limit.announced]) then
              found[i] = { f.fields[limit.announced], f.number, limit.announced }
            end
          end
          return
        end
        for i, limit in ipairs(spec) do
          -- the first of the bounded fields the frame has (HPUB's total, else PUB's size)
          local bounds = limit.bounds[1]
          for _, name in ipairs(limit.bounds) do
            if f.fields[name] ~= nil then bounds = name break end
          end
          local announced, value = found[i], f.fields[bounds]
          if announced and is_number(value) and value > announced[1] then
            tnote(f, "error", "over_limit", string.format("%s %s %d exceeds the %s of %d the %s announced at packet %d",
              f.command or string.format("Unknown(%s)", f.key_text or key_text(f.key)), (bounds:gsub("_", " ")), value,
              announced[3], announced[1], server_of(conn), announced[2]))
          end
        end
      end,
    }
  end
end
