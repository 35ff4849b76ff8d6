-- Twin of confirms.py: each confirm (or refusal) linked to the frames that sent its ids, with
-- the time it took; the sending frame learns its confirms (shown where a later pass shows links:
-- tshark -2); refused ids told with their code. (What only the end tells, the ids never
-- confirmed, and the notes on a publisher's content, are the Python side's.)
do
  local spec = CONV.rules.acks
  if spec then
    local sent_by, confirmed_by, failed_by, fail_enums = {}, {}, {}, {}
    for name, ack in pairs(spec) do
      ack.name = name
      sent_by[ack.send.command] = ack
      confirmed_by[ack.confirm.command] = ack
      if ack.fail then failed_by[ack.fail.command] = ack end
      fail_enums[name] = VS[ack.fail_enum] or {}
    end
    local function flights(conn)
      local found = conn.rules.acks
      if found == nil then
        found = {}
        conn.rules.acks = found
      end
      return found
    end

    local function send(conn, f, ack)
      local sid = f.fields[CONV.sessions[ack.session].id]
      if not is_number(sid) then return end
      local all = flights(conn)
      local key = ack.name .. ":" .. sid
      all[key] = all[key] or {}
      local flight = all[key]
      local sent = f  -- the sending frame itself, for all its items: a confirm links back to it
      local keyed = LITE.key
      local path = ack.send.path
      local list = #path == 2 and f.fields[path[1]]
      if type(list) == "table" and list.pos == nil and #list > 0 then
        -- A member of each element (a Publish frame's messages' ids), read in place: path_values
        -- would copy hundreds into a list first. An element's member of another kind takes
        -- path_values' own step for it.
        local leaf = path[2]
        for _, item in ipairs(list) do
          if type(item) == "table" then
            local id = item[leaf]
            if type(id) == "number" then
              flight[id] = sent
            else
              for _, v in ipairs(path_values(item, path, 2)) do flight[keyed(v)] = sent end
            end
          end
        end
        return
      end
      for _, item in ipairs(path_values(f.fields, path)) do
        -- a number is its own key (the commonest, without a tree): no call for it
        if type(item) == "number" then flight[item] = sent else flight[keyed(item)] = sent end
      end
    end

    local function confirm(conn, f, ack, failing)
      local sid = f.fields[CONV.sessions[ack.session].id]
      if not is_number(sid) then return end
      local ref = failing and ack.fail or ack.confirm
      local flight = flights(conn)[ack.name .. ":" .. sid] or {}
      local sent_in, waited, any = {}, {}, false
      local waits = {}  -- the wait since each sending frame, worked out once
      local keyed = LITE.key
      -- A plain array (a confirm's ids) is read in place, taking what path_values would: values,
      -- not plain tables; any other path gets path_values' list.
      local list = #ref.path == 1 and f.fields[ref.path[1]]
      if not (type(list) == "table" and list.pos == nil and #list > 0) then list = path_values(f.fields, ref.path) end
      local index = 0
      for _, item in ipairs(list) do
        if type(item) ~= "table" or getmetatable(item) ~= nil then
          index = index + 1
          local id = item
          if type(id) ~= "number" then id = keyed(item) end
          local sent = flight[id]
          flight[id] = nil
          if sent then
            local wait = waits[sent]
            if wait == nil then
              wait = round6(f.ts - sent.ts)
              waits[sent] = wait
              -- The sending frame learns its confirms (shown where a later pass shows links: tshark -2).
              local back = links_of(sent)
              back.confirm_in = back.confirm_in or {}
              if back.confirm_in[#back.confirm_in] ~= f.number then back.confirm_in[#back.confirm_in + 1] = f.number end
            end
            sent_in[index], waited[index], any = sent.number, wait, true
          end
        end
      end
      if any then
        local links = links_of(f)
        links.publish_in, links.confirm_time = sent_in, waited
      end
      if failing and ack.fail_code then
        local counts, codes = {}, {}
        for _, code in ipairs(path_values(f.fields, ack.fail_code.path)) do
          if counts[code] == nil then codes[#codes + 1] = code end
          counts[code] = (counts[code] or 0) + 1
        end
        table.sort(codes)
        local session = conn.sessions[ack.session .. ":" .. sid]
        local where = session_name(ack.session, sid, session)
        local announcements = CONV_RULES.announcement
        local gone = announcements and announcements.said(conn, session and session.values) or ""
        for _, code in ipairs(codes) do
          local count = counts[code]
          tnote(f, "warn", "refused_items", string.format("%d %s%s of %s refused: %s%s", count, ack.noun,
            count ~= 1 and "s" or "", where, named(fail_enums[ack.name], code), gone))
        end
      end
    end

    CONV_RULES.acks = {
      feed = function(conn, f)
        local ack = sent_by[f.command]
        if ack and f.kind ~= "response" then
          send(conn, f, ack)
          return
        end
        local failing = failed_by[f.command] ~= nil
        ack = failed_by[f.command] or confirmed_by[f.command]
        if ack then confirm(conn, f, ack, failing) end
      end,
      -- A publisher id reopened or deleted: its ids in flight are forgotten.
      session_ended = function(conn, session, sid)
        local all = conn.rules.acks
        if all == nil then return end
        for name, ack in pairs(spec) do
          if ack.session == session then all[name .. ":" .. sid] = nil end
        end
      end,
    }
  end
end
