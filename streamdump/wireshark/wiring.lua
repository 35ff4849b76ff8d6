-- What Wireshark calls, registered as the plugin loads: the ports, TLS and the heuristics. The
-- decoder (dissector.lua, the twins, register.lua: decoder() above) is made on the protocol's
-- first packet, and Wireshark's new-file routine (P.init) reaches it once it is there.

local live = nil  -- the decoder's functions: dissector, init, tapped

function P.init()
  if live then live.init() end
end

function P.dissector(tvb, pinfo, tree)
  if live == nil then live = decoder() end
  return live.dissector(tvb, pinfo, tree)
end

register_ports()

if not SPEC.carried_by and tls_handle then
  -- The server's TLS ports: Wireshark's TLS dissector reads them, and gives this one the plaintext.
  local tls_table = DissectorTable.get("tls.port")
  for _, port in ipairs(SPEC.tls_ports or {}) do
    tcp_table:add(port, tls_handle)
    tls_table:add(port, P)
  end
  -- The plaintext of TLS this dissector handed to Wireshark's (an upgraded connection), any port.
  local function decrypted(tvb, pinfo, tree)
    if pinfo.private.sd_tls ~= SPEC.name then return false end
    P.dissector(tvb, pinfo, tree)
    return true
  end
  P:register_heuristic("tls", decrypted)
end

-- A protocol with a magic is found on any port: TCP offers segments no port claimed.
if SPEC.magic and not SPEC.carried_by then
  local magic = ByteArray.new(SPEC.magic.bytes)
  local function heuristic(tvb, pinfo, tree)
    local at, n = SPEC.magic.offset, magic:len()
    if int(tvb:len()) < at + n or tvb(at, n):bytes() ~= magic then return false end
    -- The connection is this protocol's from now on: segments that do not start a frame
    -- (the rest of a split one) come here too.
    pinfo.conversation = P
    P.dissector(tvb, pinfo, tree)
    return true
  end
  P:register_heuristic("tcp", heuristic)
end
