-- Statistics through Wireshark's tap and menu API: `tshark -z <protocol>,stat` and the Statistics
-- menu print the request latency per command, the publish-to-confirm latency, and the messages
-- and bytes per stream, topic or subject as `streamdump stats` figures them: samples counted in
-- microseconds, median, p95 and p99 by nearest rank, milliseconds to 3 decimals. register.lua
-- keeps the tracker's links and each PDU's volume for the packet just dissected (live.tapped()).

do
  local function latency_rows(samples)
    local names = {}
    for name in pairs(samples) do names[#names + 1] = name end
    table.sort(names)
    local rows = {}
    for _, name in ipairs(names) do
      local values, total = {}, 0
      for micros, count in pairs(samples[name]) do
        values[#values + 1] = micros
        total = total + count
      end
      table.sort(values)
      local function rank(p)
        -- The smallest value with p% of the samples at or below it (p * total is exact in
        -- integers: p and total are).
        local wanted = math.max(1, math.ceil(p * total / 100))
        local seen = 0
        for _, micros in ipairs(values) do
          seen = seen + samples[name][micros]
          if seen >= wanted then return micros end
        end
        return values[#values]
      end
      local function ms(micros) return string.format("%.3f", micros / 1000) end
      rows[#rows + 1] = string.format("  %-28s %8d %10s %10s %10s %10s %10s", name, total,
        ms(values[1]), ms(rank(50)), ms(rank(95)), ms(rank(99)), ms(values[#values]))
    end
    return rows
  end

  -- Frames, messages and bytes per subject and direction, sorted as stats sorts them.
  local function volume_rows(volume)
    local keys = {}
    for key in pairs(volume) do keys[#keys + 1] = key end
    table.sort(keys, function(a, b)
      local x, y = volume[a], volume[b]
      if x.subject ~= y.subject then return x.subject < y.subject end
      return x.direction < y.direction
    end)
    local rows = {}
    for _, key in ipairs(keys) do
      local v = volume[key]
      rows[#rows + 1] = string.format("  %-40s %-14s %8d %10d %12d", v.subject, v.direction, v.frames, v.messages,
        v.bytes)
    end
    return rows
  end

  local function stats_text(srt, confirm, volume)
    local head = string.format("  %-28s %8s %10s %10s %10s %10s %10s",
      "Command", "Count", "Min", "Median", "P95", "P99", "Max")
    local lines = { string.rep("=", 100), SPEC.title .. " statistics (streamdump)", "" }
    local sections = {
      { "Request latency per command (ms):", srt },
      { "Publish-to-confirm latency (ms):", confirm },
    }
    for _, section in ipairs(sections) do
      lines[#lines + 1] = section[1]
      lines[#lines + 1] = head
      for _, row in ipairs(latency_rows(section[2])) do lines[#lines + 1] = row end
      lines[#lines + 1] = ""
    end
    if SPEC.subject then
      lines[#lines + 1] = "Messages per " .. SPEC.subject .. ":"
      lines[#lines + 1] = string.format("  %-40s %-14s %8s %10s %12s", SPEC.subject:sub(1, 1):upper() .. SPEC.subject:sub(2),
        "Direction", "Frames", "Messages", "Bytes")
      for _, row in ipairs(volume_rows(volume)) do lines[#lines + 1] = row end
      lines[#lines + 1] = ""
    end
    lines[#lines + 1] = string.rep("=", 100)
    return table.concat(lines, "\n") .. "\n"
  end

  -- A tap on the protocol's frames; draw(text) is called with the figures so far.
  local function stats_tap(draw)
    local srt, confirm, volume = {}, {}, {}
    local function add(into, name, seconds, count)
      local micros = math.floor(seconds * 1000000 + 0.5)
      into[name] = into[name] or {}
      into[name][micros] = (into[name][micros] or 0) + (count or 1)
    end
    local tap = Listener.new(nil, SPEC.name)
    function tap.packet(pinfo)
      -- (the tap sees this protocol's packets only, so its decoder is there)
      local tapped = live and live.tapped() or {}
      local here = tapped.number == int(pinfo.number) and tapped or {}
      for _, f in pairs(here.timed or {}) do
        local links, name = f.links, f.command or "?"
        if type(links.response_time) == "number" then add(srt, name, links.response_time) end
        local waited = links.confirm_time
        local runs = type(waited) == "table" and waited.runs and waited
        if runs then  -- runs of ids with one wait (confirms.lua)
          for r = 1, #runs, 3 do
            if type(runs[r + 2]) == "number" then add(confirm, name, runs[r + 2], runs[r + 1] - runs[r] + 1) end
          end
        elseif type(waited) == "table" then
          local count = 0
          for index in pairs(waited) do if index > count then count = index end end
          for index = 1, count do
            if type(waited[index]) == "number" then add(confirm, name, waited[index]) end
          end
        end
      end
      for _, moved in pairs(here.moved or {}) do
        local subject, direction = moved[1], moved[2]
        local key = subject .. "\0" .. direction
        local v = volume[key]
        if v == nil then
          v = { subject = subject, direction = direction, frames = 0, messages = 0, bytes = 0 }
          volume[key] = v
        end
        v.frames, v.messages, v.bytes = v.frames + 1, v.messages + moved[3], v.bytes + moved[4]
      end
    end
    function tap.draw() draw(stats_text(srt, confirm, volume)) end
    function tap.reset() srt, confirm, volume = {}, {}, {} end
    return tap
  end

  register_stat_cmd_arg(SPEC.name .. ",stat", function() stats_tap(io.write) end)
  if gui_enabled() then
    register_menu("streamdump/" .. SPEC.title, function()
      local window = TextWindow.new(SPEC.title .. " statistics (streamdump)")
      local tap = stats_tap(function(text) window:set(text) end)
      window:set_atclose(function() tap:remove() end)
      retap_packets()
    end, MENU_STAT_GENERIC)
  end
end
