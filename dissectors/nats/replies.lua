-- Twin of replies.py: a frame naming where to answer is a request; the other side's first frame
-- sent there is its answer, linked both ways; an answer whose status says the request failed is
-- told. (A request never answered needs the end of the capture: the Python side tells it.)
do
  local spec = CONV.rules.replies
  if spec then
    CONV_RULES.replies = {
      before = function(conn, f)
        if not f.command then return end
        local asked = conn.rules.replies
        if asked == nil then
          asked = {}
          conn.rules.replies = asked
        end
        local to = f.fields[spec.answer]
        if type(to) == "string" then
          local key = side_key(not f.from_client) .. to
          local request = asked[key]
          if request then
            asked[key] = nil
            pair(request, f)
            for _, kept in ipairs(spec.keep) do
              local v = request.fields[kept[2]]
              if v ~= nil then
                local links = links_of(f)
                links.kept = links.kept or {}
                table.insert(links.kept, { kept[1], v })
              end
            end
            local status = spec.status and f.fields[spec.status]
            local meaning = is_number(status) and spec.statuses[status]
            if meaning then
              tnote(f, "warn", "reply_status", string.format("the %s answered the %s to %s (packet %d) with status %d: %s",
                server_of(conn), request.command, tostring(request.fields[spec.answer]), request.number, status, meaning))
            end
            request.pending = nil
            request.fields = nil  -- answered: only its number and links stay
          end
        end
        local ask = f.fields[spec.ask]
        if type(ask) == "string" and ask ~= "" then
          asked[side_key(f.from_client) .. ask] = f
          f.pending = true  -- its fields name it when its answer comes
        end
      end,
    }
  end
end
