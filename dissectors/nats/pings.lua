-- Twin of pings.py: each PING is answered by the other side's next PONG, linked like a request
-- and its response. (A PING never answered needs the end of the capture: the Python side.)
do
  local spec = CONV.rules.pings
  if spec then
    CONV_RULES.pings = {
      before = function(conn, f)
        if f.command ~= spec.ask and f.command ~= spec.answer then return end
        local waiting = conn.rules.pings
        if waiting == nil then waiting = {}; conn.rules.pings = waiting end
        if f.command == spec.ask then
          local list = waiting[side_key(f.from_client)] or {}
          list[#list + 1] = f
          waiting[side_key(f.from_client)] = list
        else
          local list = waiting[side_key(not f.from_client)]
          if list and #list > 0 then pair(table.remove(list, 1), f) end
        end
      end,
    }
  end
end
