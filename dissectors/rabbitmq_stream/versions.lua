-- Twin of versions.py: the command versions each peer announced, and frames outside them.
do
  local spec = CONV.rules.versions
  if spec then
    CONV_RULES.versions = {
      feed = function(conn, f)
        local announced = conn.rules.versions
        if announced == nil then announced = {}; conn.rules.versions = announced end
        if f.command == spec.command then
          local items = f.fields[spec.path[1]]
          if type(items) == "table" then
            local known = {}
            for _, item in ipairs(items) do
              if item.command_key and item.min_version and item.max_version then
                known[item.command_key] = { item.min_version, item.max_version }
              end
            end
            announced[side_key(f.from_client)] = known
          end
        end
        local theirs = announced[side_key(not f.from_client)]
        local range = theirs and theirs[f.key]
        if range and (f.version < range[1] or f.version > range[2]) then
          tnote(f, "warn", "version", string.format(
            "%s version %d is outside the versions the peer announced (%d..%d)", f.command, f.version, range[1], range[2]))
        end
      end,
    }
  end
end
