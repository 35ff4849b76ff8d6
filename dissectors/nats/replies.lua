-- Twin of replies.py: a frame naming where to answer is a request; the other side's first frame
-- sent there is its answer, linked both ways; an answer whose status says the request failed is
-- told. A request answered many times (a JetStream pull) is answered by the messages delivered
-- to a subscription of its reply subject (the first its answer, the others linked back), and by
-- statuses sent to the reply subject (heartbeats linked back, an end closing it). (A request
-- never answered needs the end of the capture: the Python side tells it.)
do
  local spec = CONV.rules.replies
  if spec then
    local many = spec.many
    local function kept_link(f, name)
      for _, pair in ipairs((f.links and f.links.kept) or {}) do
        if pair[1] == name then return pair[2] end
      end
      return nil
    end
    local function keep(request, f)
      for _, kept in ipairs(spec.keep) do
        local v = request.fields[kept[2]]
        if v ~= nil then keep_link(links_of(f), kept[1], v) end
      end
    end
    local function failed(conn, request, f, status, meaning)
      tnote(f, "warn", "reply_status", string.format("the %s answered the %s to %s (packet %d) with status %d: %s",
        server_of(conn), request.command, tostring(request.fields[spec.answer]), request.number, status, meaning))
    end
    local function is_many(f)
      if many == nil then return false end
      return contains(many.values, f.fields[many.field])
    end
    CONV_RULES.replies = {
      before = function(conn, f)
        if not f.command then return end
        local asked = conn.rules.replies
        if asked == nil then
          asked = {}
          conn.rules.replies = asked
          conn.rules.replies_many = {}
        end
        local opened = conn.rules.replies_many
        local to = f.fields[spec.answer]
        if type(to) == "string" then
          local key = side_key(not f.from_client) .. to
          local open = opened[key]
          local request = open == nil and asked[key] or nil
          if open then
            local status = spec.status and f.fields[spec.status]
            local heartbeat = is_number(status) and many.heartbeats[status] ~= nil
            local first = not open.answered and not heartbeat
            if first then
              pair(open.frame, f)
              open.answered = true
            else
              links_of(f).request_in = open.frame.number
            end
            keep(open.frame, f)
            if is_number(status) and not heartbeat then
              opened[key] = nil
              local meaning = spec.statuses[status]
              if first and meaning then failed(conn, open.frame, f, status, meaning) end
              open.frame.pending = nil
              open.frame.fields = nil
            end
          elseif request then
            asked[key] = nil
            pair(request, f)
            keep(request, f)
            local status = spec.status and f.fields[spec.status]
            local meaning = is_number(status) and spec.statuses[status]
            if meaning then failed(conn, request, f, status, meaning) end
            if spec.again and contains(spec.again.values, f.fields[spec.again.field]) then
              asked[key] = request  -- open for the answer that ends it
            else
              request.pending = nil
              request.fields = nil  -- answered: only its number and links stay
            end
          end
        end
        local ask = f.fields[spec.ask]
        if type(ask) == "string" and ask ~= "" then
          local key = side_key(f.from_client) .. ask
          if is_many(f) then
            opened[key] = { frame = f, to = ask }
            asked[key] = nil
          else
            asked[key] = f
          end
          f.pending = true  -- its fields name it when its answer comes
        end
      end,
      feed = function(conn, f)
        if many == nil or f.from_client or f.links == nil or f.links.request_in ~= nil then return end
        local opened = conn.rules.replies_many
        local via = kept_link(f, many.via)
        if opened == nil or type(via) ~= "string" then return end
        local open = opened[side_key(true) .. via]
        if open == nil and (via:find("*", 1, true) or via:find(">", 1, true)) then
          for k, o in pairs(opened) do
            if k:sub(1, 1) == side_key(true) and wildcard_matches(via, o.to)
              and (open == nil or o.frame.number > open.frame.number) then
              open = o
            end
          end
        end
        if open == nil then return end
        if open.answered then
          links_of(f).request_in = open.frame.number
        else
          pair(open.frame, f)
          open.answered = true
        end
      end,
    }
  end
end
