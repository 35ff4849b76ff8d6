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
      if found == nil then found = {}; conn.rules.acks = found end
      return found
    end

    -- A publisher's ids in flight, each with the frame that sent it, as runs: a frame's ids that
    -- are consecutive and above every id sent before (a client numbers its messages 1, 2, 3...)
    -- are one run { lo, hi, sent, next, gone }, with no entry per id; runs are kept in order, the
    -- ids below next and those in gone confirmed. Other ids (sent again, or out of order) are
    -- loose, one entry each, and take the same id out of the run holding it: the latest frame
    -- that sent an id is the one its confirm links to, and an id is confirmed once.
    local function new_flight()
      -- runs[head..tail] are live; those before head are wholly confirmed and let go
      return { runs = {}, head = 1, tail = 0, top = nil, loose = {}, at = nil }
    end

    -- The run holding id, still live there; nil where none does.
    local function run_of(flight, id)
      local run = flight.at
      if run and id >= run.lo and id <= run.hi then return run end
      local runs = flight.runs
      local low, high = flight.head, flight.tail
      while low <= high do
        local mid = math.floor((low + high) / 2)
        run = runs[mid]
        if id < run.lo then high = mid - 1 elseif id > run.hi then low = mid + 1 else
          flight.at = run
          return run
        end
      end
      return nil
    end

    -- id taken out of its run (confirmed, or sent again): whether it was live there.
    local function take(run, id)
      if id < run.next or (run.gone and run.gone[id]) then return false end
      if id == run.next then
        local next, gone = id + 1, run.gone
        while gone and gone[next] do
          gone[next] = nil
          next = next + 1
        end
        run.next = next
      else
        run.gone = run.gone or {}
        run.gone[id] = true
      end
      return true
    end

    local function loose_id(flight, id, sent)
      if type(id) == "number" then
        local run = run_of(flight, id)
        if run then take(run, id) end
        if flight.top == nil or id > flight.top then flight.top = id end
      end
      flight.loose[id] = sent
    end

    -- A frame's ids (numbers, or keys): one run where they allow it, else loose.
    local function add_ids(flight, ids, sent)
      local n = #ids
      local lo, hi = ids[1], ids[n]
      local run = type(lo) == "number" and type(hi) == "number" and hi - lo == n - 1
        and (flight.top == nil or lo > flight.top)
      if run and not LITE.runs[ids] then  -- (ids the loop read found following on: no check each)
        for k = 2, n do
          if ids[k] ~= lo + k - 1 then
            run = false
            break
          end
        end
      end
      if run then
        flight.tail = flight.tail + 1
        flight.runs[flight.tail] = { lo = lo, hi = hi, sent = sent, next = lo }
        flight.top = hi
        return
      end
      for k = 1, n do loose_id(flight, ids[k], sent) end
    end

    -- The frame that sent id, taken out of the flight (an id is confirmed once); nil if none.
    local function confirmed(flight, id)
      local sent = flight.loose[id]
      if sent ~= nil then
        flight.loose[id] = nil
        return sent
      end
      if type(id) ~= "number" then return nil end
      local run = run_of(flight, id)
      if run == nil or not take(run, id) then return nil end
      return run.sent
    end

    -- Runs wholly confirmed at the front are let go.
    local function let_go(flight)
      local runs, head = flight.runs, flight.head
      while head <= flight.tail and runs[head].next > runs[head].hi do
        runs[head] = nil
        head = head + 1
      end
      flight.head = head
    end

    local function send(conn, f, ack)
      local sid = f.fields[CONV.sessions[ack.session].id]
      if not is_number(sid) then return end
      local all = flights(conn)
      local key = session_key(ack.name, sid)
      all[key] = all[key] or new_flight()
      local flight = all[key]
      local sent = f  -- the sending frame itself, for all its items: a confirm links back to it
      local keyed = LITE.key
      local path = ack.send.path
      local list = #path == 2 and f.fields[path[1]]
      if type(list) == "table" and list.projected == path[2] then
        -- Read without a tree, each element as its id alone (LITE.plan)
        if #list > 0 then add_ids(flight, list, sent) end
        return
      end
      local ids = {}
      if type(list) == "table" and list.projected == nil and list.pos == nil and #list > 0 then
        -- A member of each element (a Publish frame's messages' ids), read in place: path_values
        -- would copy hundreds into a list first. An element's member of another kind takes
        -- path_values' own step for it.
        local leaf = path[2]
        for i = 1, #list do
          local item = list[i]
          if type(item) == "table" then
            local id = item[leaf]
            local kind = type(id)
            if kind == "number" then
              ids[#ids + 1] = id
            elseif kind == "userdata" then  -- a 64-bit id read with a tree: path_values' one value
              ids[#ids + 1] = keyed(id)
            else
              for _, v in ipairs(path_values(item, path, 2)) do ids[#ids + 1] = keyed(v) end
            end
          end
        end
      else
        for _, item in ipairs(path_values(f.fields, path)) do
          -- a number is its own key (the commonest, without a tree): no call for it
          if type(item) == "number" then ids[#ids + 1] = item else ids[#ids + 1] = keyed(item) end
        end
      end
      if #ids > 0 then add_ids(flight, ids, sent) end
    end

    local function confirm(conn, f, ack, failing)
      local sid = f.fields[CONV.sessions[ack.session].id]
      if not is_number(sid) then return end
      local ref = failing and ack.fail or ack.confirm
      local flight = flights(conn)[session_key(ack.name, sid)] or new_flight()
      -- The links, per id, as runs of ids sent by one frame (a confirm's hundreds of ids come from a
      -- few frames): the frame that sent them and the wait since. Flagged runs = true, not wrapped.
      local a, b = { runs = true }, { runs = true }
      local last, wait = nil, nil  -- the last sending frame, and the wait since it
      local waits = {}
      local keyed = LITE.key
      local function put(first, final, sent)
        if sent ~= last then
          last, wait = sent, waits[sent]
          if wait == nil then
            wait = round6(f.ts - sent.ts)
            waits[sent] = wait
            -- The sending frame learns its confirms (shown where a later pass shows links: tshark -2).
            -- (A number while it is one: most frames' messages are confirmed together, and the
            -- link is kept for every Publish of the capture. A list once there are more.)
            local back = links_of(sent)
            local was = back.confirm_in
            if was == nil then
              back.confirm_in = f.number
            elseif type(was) == "number" then
              if was ~= f.number then back.confirm_in = { was, f.number } end
            elseif was[#was] ~= f.number then
              was[#was + 1] = f.number
            end
          end
        elseif a[#a - 1] == first - 1 then  -- the same frame's, next to the last run: one run
          a[#a - 1], b[#b - 1] = final, final
          return
        end
        a[#a + 1], a[#a + 2], a[#a + 3] = first, final, sent.number
        b[#b + 1], b[#b + 2], b[#b + 3] = first, final, wait
      end
      -- A plain array (a confirm's ids) is read in place, taking what path_values would: values,
      -- not plain tables; any other path gets path_values' list.
      local list = #ref.path == 1 and f.fields[ref.path[1]]
      if not (type(list) == "table" and list.pos == nil and #list > 0) then list = path_values(f.fields, ref.path) end
      local index, k, n = 0, 1, #list
      -- The commonest case, ids confirmed in the order they were sent: the ids that follow the
      -- last one in its run (no loose ids, none of that run confirmed out of order) taken at once.
      local run = next(flight.loose) == nil and flight.at or nil
      local follows = LITE.runs[list]  -- each id one more than the one before (the loop saw)
      while k <= n do
        local id = list[k]
        if run and id == run.next and id <= run.hi and run.gone == nil then
          local j, stop = k, math.min(n, k + (run.hi - id))
          if follows then j = stop else
            while j < stop and list[j + 1] == list[j] + 1 do j = j + 1 end
          end
          run.next = list[j] + 1
          put(index + 1, index + 1 + j - k, run.sent)
          index, k = index + 1 + j - k, j + 1
        else
          if type(id) ~= "table" or getmetatable(id) ~= nil then
            index = index + 1
            if type(id) ~= "number" then id = keyed(id) end
            local sent = confirmed(flight, id)
            if sent then put(index, index, sent) end
            run = next(flight.loose) == nil and flight.at or nil
          end
          k = k + 1
        end
      end
      let_go(flight)
      if #a > 0 then
        local links = links_of(f)
        links.publish_in, links.confirm_time = a, b
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
