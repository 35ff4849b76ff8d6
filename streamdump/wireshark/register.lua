-- The decoder's side of the wiring: TCP reassembly, the connection state, the Info column and
-- the tree of each frame. It ends in what wiring.lua hands packets to (the decoder's functions).

-- memo: each PDU's tracked frame, for later passes: the frame itself while the tracker may
-- still change it (pending), else its index in SETTLED (settled, below).
local conns, memo = {}, {}
local SETTLED = { n = 0, links = {}, notes = {}, key = {}, command = {} }
local tls_from = {}  -- connection -> the packet its TLS starts at (the client's ClientHello)
-- What stats.lua's tap counts for the packet just dissected, by each PDU's place in it: the
-- frames with a response or confirm time (timed), and what each PDU moves (moved: MESSAGES.volume,
-- worked out where a tree is built). A tap runs after each packet's dissection, so only that
-- packet's are kept: kept for all, they were tables by the ten thousand that every cycle of the
-- collector marked, and -V slowed down as they grew (bench/README.md, "Eighth round").
local TAPPED = {}

local function init()
  conns, memo, tls_from, TAPPED = {}, {}, {}, {}
  SETTLED = { n = 0, links = {}, notes = {}, key = {}, command = {} }
end

local function in_ports(port)
  if SPEC.carried_by then return false end
  local known = port_is_server[port]
  if known ~= nil then return known end
  known = false
  for _, tls_port in ipairs(SPEC.tls_ports or {}) do
    if port == tls_port then known = true end
  end
  local text = tostring(P.prefs.ports)
  for part in text:gmatch("[^,]+") do
    local low, high = part:match("^%s*(%d+)%s*%-%s*(%d+)%s*$")
    if low then
      if port >= tonumber(low) and port <= tonumber(high) then known = true end
    elseif tonumber(part) == port then
      known = true
    end
  end
  port_is_server[port] = known
  return known
end

-- Whether the packet goes to the server: to a port of the preference; on a connection found
-- by its magic on other ports, to the lower port (as streamdump decides without the SYN).
local function to_server(pinfo)
  if in_ports(pinfo.dst_port) then return true end
  if in_ports(pinfo.src_port) then return false end
  return int(pinfo.dst_port) < int(pinfo.src_port)
end

-- The connection as `streamdump stats` names it, client first: "10.0.0.1:50000 → 10.0.0.2:5552".
local function endpoint(address, port)
  local text = tostring(address)
  if text:find(":", 1, true) then text = "[" .. text .. "]" end
  return text .. ":" .. int(port)
end

local function connection_text(pinfo, from_client)
  local src, dst = endpoint(pinfo.src, pinfo.src_port), endpoint(pinfo.dst, pinfo.dst_port)
  if from_client then return src .. " \226\134\146 " .. dst end
  return dst .. " \226\134\146 " .. src
end

-- The packet's connection key and direction (whether it goes to the server), worked out once
-- per packet (a packet holds many PDUs): kept in conns under the number 0, which no key is.
-- number: the packet's, where the caller has read it (each read is a C call).
local conn_key
do
  -- ":port" for each port met, made once (a number written as text is a sprintf)
  local port_text = setmetatable({}, { __index = function(t, port)
    local text = ":" .. port
    t[port] = text
    return text
  end })
  conn_key = function(pinfo, number)
    number = number or pinfo.number
    local last = conns[0]
    if last and last[1] == number then return last[2], last[3] end
    local a = tostring(pinfo.src) .. port_text[pinfo.src_port]
    local b = tostring(pinfo.dst) .. port_text[pinfo.dst_port]
    local key = a < b and a .. "|" .. b or b .. "|" .. a
    local from_client = to_server(pinfo)
    if last then last[1], last[2], last[3] = number, key, from_client else conns[0] = { number, key, from_client } end
    return key, from_client
  end
end

-- An array link as a plain array: a confirm's keeps its per-id links as runs of one value,
-- { first, last, value, ..., runs = true } (confirms.lua), which this spells out.
local function link_array(value)
  local runs = value.runs and value
  if not runs then return value end
  local out = {}
  for r = 1, #runs, 3 do
    for index = runs[r], runs[r + 1] do out[index] = runs[r + 2] end
  end
  return out
end

-- Whether an array link's runs come in the order of their elements, apart: then they are shown
-- as they are, with no array spelt out (a confirm's hundreds of ids are a few runs).
local function runs_ascend(runs)
  for r = 4, #runs, 3 do
    if runs[r] <= runs[r - 2] then return false end
  end
  return #runs > 0 and runs[1] >= 1
end

local function show_links(tree, tvb, f)
  local links = f.links
  if links == nil or tree == nil or next(links) == nil then return end
  local nowhere = tvb(0, 0)  -- one range for all: a confirm links hundreds of messages
  local holder = tree:add(F.links, nowhere)
  holder:set_generated()
  local function gen(name, value)
    if value ~= nil and F[name] then TI.set_generated(TI.add(holder, F[name], nowhere, value)) end
  end
  -- In the order the spec's conversation.links lists them; an array link gives one item per element.
  for _, name in ipairs(SPEC.conversation.links) do
    local value = links[name]
    local runs = type(value) == "table" and value.runs and value
    if runs and runs_ascend(runs) then
      -- Runs in the order of their elements, none overlapping: one item per element, as spelt out.
      for r = 1, #runs, 3 do
        local each = runs[r + 2]
        for _ = runs[r], runs[r + 1] do gen(name, each) end
      end
    elseif type(value) == "table" then
      value = link_array(value)
      local count = 0
      for index in pairs(value) do if index > count then count = index end end
      for index = 1, count do gen(name, value[index]) end
    else
      gen(name, value)
    end
  end
  for _, pair in ipairs(links.kept or {}) do gen(pair[1], pair[2]) end
  local parts = {}
  if links.request_in then parts[#parts + 1] = "request in " .. links.request_in end
  if links.response_in then parts[#parts + 1] = "response in " .. links.response_in end
  if links.opened_in then parts[#parts + 1] = "opened in " .. links.opened_in end
  holder:set_text("Conversation: " .. (#parts > 0 and table.concat(parts, ", ") or "linked"))
end

local function show_notes(tree, notes)
  if tree == nil or notes == nil then return end
  for _, n in ipairs(notes) do
    local entry = E[n.kind] and E[n.kind][n.severity]
    if entry == nil then error("no expert entry for a " .. tostring(n.kind) .. " " .. n.severity .. " note") end
    tree:add_proto_expert_info(entry, n.message)
  end
end

local LENGTH_END = LENGTH.counts == "after" and (LENGTH.offset + LENGTH.width) or 0

-- The tap's entries of packet number (what a dissection of another packet left is let go).
local function tapped(number)
  if TAPPED.number ~= number then TAPPED = { number = number, timed = {}, moved = {} } end
  return TAPPED
end

local function timed(f, count)
  local links = f.links
  if links == nil or (links.response_time == nil and links.confirm_time == nil) then return end
  tapped(f.number).timed[count] = f
end

local function moved(tree, tvb, pinfo, count, volume)
  if volume == nil then return end
  local subject, direction, messages, size = volume[1], volume[2], volume[3], volume[4]
  local nowhere = tvb(0, 0)
  local holder = tree:add(F.volume, nowhere)
  holder:set_generated()
  holder:set_text(string.format("Messages: %d to %s %s (%s), %d bytes", messages, SPEC.subject, quoted(subject),
    direction, size))
  holder:add(F["volume." .. SPEC.subject], nowhere, subject):set_generated()
  holder:add(F["volume.direction"], nowhere, direction):set_generated()
  holder:add(F["volume.messages"], nowhere, messages):set_generated()
  holder:add(F["volume.bytes"], nowhere, UInt64.new(size)):set_generated()  -- a uint64 field takes a UInt64
  tapped(int(pinfo.number)).moved[count] = volume
end

-- What a later pass reads of a frame the tracker is done with (not pending): its links, notes,
-- command and key, in SETTLED's columns at the index this returns ("Eighth round"). links_of puts
-- a table it makes for the frame later (for an answer's link, a confirm's) in its slot.
local function settled(f)
  local n = SETTLED.n + 1
  SETTLED.n = n
  SETTLED.links[n], SETTLED.notes[n], SETTLED.key[n], SETTLED.command[n] = f.links, f.tnotes, f.key, f.command
  f.settled_in, f.settled_at = SETTLED.links, n
  return n
end

-- A settled frame as a later pass reads it (number: its packet's).
local function settled_frame(n, number)
  return {
    number = number, links = SETTLED.links[n], tnotes = SETTLED.notes[n], key = SETTLED.key[n],
    command = SETTLED.command[n],
  }
end

local function conn_of(pinfo, key)
  local conn = conns[key]
  if conn == nil then
    conn = new_conn()
    conn.server_port = to_server(pinfo) and int(pinfo.dst_port) or int(pinfo.src_port)
    conns[key] = conn
  end
  return conn
end

local function dissect_pdu(tvb, pinfo, root)
  -- Where Wireshark keeps no tree (see dissector, below) the frame is decoded only as far as Info,
  -- the links and the expert checks need (lite); its notes go to the empty item, which reports them.
  local tree = nil
  if root and not PDU_CONTEXT.no_tree then tree = root:add(P, tvb()) end
  -- Which PDU of the packet: its place in the packet's bytes, and how many came before it in
  -- this dissection (the plaintext of several TLS records all starts at offset 0).
  -- (pinfo's attributes are each read once: every read is a C call, pinfo.private and
  -- pinfo.cols a new userdata each)
  local private, number, visited = pinfo.private, int(pinfo.number), pinfo.visited
  local count = (tonumber(private.sd_pdus) or 0) + 1
  private.sd_pdus = count == 1 and "1" or tostring(count)
  -- Its key: a number where one holds the three exactly (2^53), else text. (A number written
  -- as text costs a sprintf each: three a PDU.)
  local offset = int(tvb:offset())
  local pdu
  if number < 67108864 and offset < 131072 and count < 1024 then
    pdu = (number * 131072 + offset) * 1024 + count
  else
    pdu = number .. ":" .. offset .. ":" .. count
  end
  local f = memo[pdu]
  if type(f) == "number" then f = settled_frame(f, number) end
  local ckey, from_client = conn_key(pinfo, number)
  -- A response whose key field holds its status has its request's command: found by
  -- correlation id on the first pass, remembered for the later ones. (Only where that is
  -- how responses are known: a closure a frame is not free.)
  local lookup = nil
  if SPEC.frame.response_key == "request" then
    lookup = function(what, corr, key)
      if f then return f.key end
      local requests = conn_of(pinfo, ckey).requests
      if what == "request" then
        requests[side_key(from_client) .. tostring(corr)] = key
        return key
      end
      local asker = side_key(not from_client) .. tostring(corr)
      local found = requests[asker]
      requests[asker] = nil
      return found
    end
  end
  PDU_CONTEXT.pinfo, PDU_CONTEXT.root, PDU_CONTEXT.carried = pinfo, root, {}
  local frame = decode_frame(tvb, tree, lookup, tree == nil)
  local carried_now = PDU_CONTEXT.carried
  PDU_CONTEXT.pinfo = nil
  if not visited and f == nil then
    f = {
      number = number, ts = pinfo.abs_ts, from_client = from_client,
      kind = frame.kind, command = frame.command, key = frame.key, wire_key = frame.wire_key, key_text = frame.key_text,
      version = frame.version, length = (frame.size or 0) + LENGTH_END, fields = frame.fields,
    }
    if frame.wire_key ~= nil then track(conn_of(pinfo, ckey), f) end
    if f.pending then
      memo[pdu] = f
    else
      f.fields = nil
      memo[pdu] = settled(f)
    end
  end
  if f then timed(f, count) end
  local name = frame.command or (frame.wire_key ~= nil and string.format("Unknown(%s)", frame.key_text)) or "Malformed"
  local text = name
  if frame.kind == "request" or frame.kind == "response" then text = text .. " " .. frame.kind end
  if frame.info and frame.info ~= "" then text = text .. " " .. frame.info end
  if tree then
    tree:append_text(": " .. text)
    if LENGTH.width == 0 and frame.size then
      tree:add(F.size, tvb(0, 0), frame.size):set_generated()  -- no field says it: the PDU's length
    end
    tree:add(F.command, tvb(0, 0), name):set_generated()
    tree:add(F.kind, tvb(0, 0), frame.kind):set_generated()
    tree:add(F.connection, tvb(0, 0), connection_text(pinfo, from_client)):set_generated()
    if f then show_links(tree, tvb, f) end
    if MESSAGES.volume then moved(tree, tvb, pinfo, count, MESSAGES.volume(frame, f or {}, from_client, int(tvb:len()))) end
  end
  -- Without a tree the notes go to the root item, so expert checks still see them.
  show_notes(tree or root, frame.notes)
  if f then show_notes(tree or root, f.tnotes) end
  -- The short name: the Protocol column is narrow. Expert notes stay in Expert Info, out of Info.
  local cols = pinfo.cols
  cols.protocol = SPEC.short
  -- The dissection's first PDU (of any protocol of the plugin: pinfo.private is the
  -- dissection's, shared by them) sets Info, the others add to it.
  if count > 1 then
    cols.info:append("; " .. text)
  else
    cols.info = text
  end
  for _, pending in ipairs(carried_now) do pending[1]:call(pending[2], pinfo, root) end
  return int(tvb:len())
end

local function pdu_length(tvb, pinfo, offset)
  if LENGTH.width == 0 then
    -- The package's rule: the PDU's length, 0 while the bytes do not say yet, -1 where none starts.
    local total = FRAMING.pdu_length(tvb, offset)
    if total < 0 then return int(tvb:reported_len()) - offset end
    return total
  end
  if int(tvb:len()) - offset < LENGTH.offset + LENGTH.width then
    return int(tvb:reported_len()) - offset  -- the capture cut the length field (snaplen)
  end
  local total = frame_length(tvb, offset)
  if total > SPEC.max_size + LENGTH_END or total < HEADER_SIZE then
    -- Not a frame boundary (bytes lost before it): the rest of the segment is one unframed run.
    return int(tvb:reported_len()) - offset
  end
  return total
end

local function client_hello(tvb)
  if int(tvb:len()) < 6 then return false end
  return tvb(0, 1):uint() == 22 and tvb(1, 1):uint() == 3 and tvb(5, 1):uint() == 1
end

local function through_tls(tvb, pinfo)
  local key, from_client = conn_key(pinfo, nil)
  local from = tls_from[key]
  if from == nil and from_client and not pinfo.visited then
    local conn = conn_of(pinfo, key)
    if not conn.client_spoke then
      conn.client_spoke = true
      if client_hello(tvb) then
        from = int(pinfo.number)
        tls_from[key] = from
      end
    end
  end
  -- (asked only on a connection that went TLS: pinfo.private is a new userdata a read)
  if from == nil or pinfo.private.sd_tls == SPEC.name then return false end  -- the plaintext TLS hands back
  return int(pinfo.number) >= from
end

local function dissector(tvb, pinfo, tree)
  -- Where Wireshark keeps no tree (tshark without -V or filters, a first pass), Lua still gets
  -- an item, but an empty one; a real tree's comes as Wireshark's hidden "Lua fake item". (Asked
  -- here: inside dissect_tcp_pdus the item is TCP's, which tells neither.)
  PDU_CONTEXT.no_tree = not (tree ~= nil and tree.hidden)
  if GC_PACE.tree == PDU_CONTEXT.no_tree then GC_PACE.set(not PDU_CONTEXT.no_tree) end
  if SPEC.carried_by then
    -- Its carrier gives one whole frame.
    dissect_pdu(tvb, pinfo, tree)
    return int(tvb:len())
  end
  if tls_handle and through_tls(tvb, pinfo) then
    pinfo.private.sd_tls = SPEC.name  -- which protocol: every one has a TLS heuristic
    local used = tls_handle:call(tvb, pinfo, tree)
    pinfo.private.sd_tls = nil
    return used
  end
  dissect_tcp_pdus(tvb, tree, math.max(1, LENGTH.offset + LENGTH.width), pdu_length, dissect_pdu, true)
  return int(tvb:len())
end

return { dissector = dissector, init = init, tapped = function() return TAPPED end }
