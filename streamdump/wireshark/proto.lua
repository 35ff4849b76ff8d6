-- What Wireshark must have of a protocol when the plugin loads: its Proto, fields and expert
-- entries, its preferences, its ports, and the Lua collector's pace. The decoder itself
-- (dissector.lua, the package's twins, register.lua) is made on the protocol's first packet
-- (wiring.lua): a capture of one protocol keeps one runtime on Lua's heap, not five, and the
-- collector marks the other four's thousands of tables and closures in none of its cycles.

local P = Proto(SPEC.name, SPEC.title)

-- The Lua collector's pace. A tree costs a dozen userdata a message (TvbRanges and TreeItems,
-- each freed by its finalizer); at Lua's default pace dead ones pile up and glibc's malloc spends
-- a quarter of a -V run on the fragmented heap. Cycles from 1.2 times the live heap, run ten times
-- as fast, took a fifth to a third less time (bench/README.md, ninth and tenth rounds). A pass
-- without a tree makes few userdata, and each cycle marks all the tracker keeps: there the
-- default pace took a tenth less time ("Third round"). Each pass gets its own (GC_PACE.set); the
-- setting is the Lua state's, shared with other plugins: it changes when garbage is freed only.
if GC_PACE.set == nil then
  local TREE_PAUSE, TREE_STEPMUL = 120, 1000
  GC_PACE.pause, GC_PACE.stepmul = collectgarbage("setpause", TREE_PAUSE), collectgarbage("setstepmul", TREE_STEPMUL)
  GC_PACE.tree = true
  GC_PACE.set = function(tree)
    GC_PACE.tree = tree
    collectgarbage("setpause", tree and TREE_PAUSE or GC_PACE.pause)
    collectgarbage("setstepmul", tree and TREE_STEPMUL or GC_PACE.stepmul)
  end
end
local F = {}            -- flat name -> ProtoField
local E = {}            -- group -> severity -> ProtoExpert
local NAME_TITLE = {}   -- flat name -> display title
local VS = {}           -- enum name -> value string table

for name, values in pairs(SPEC.enums) do VS[name] = values end
VS.commands = {}
for key, command in pairs(SPEC.commands) do VS.commands[key] = command.name end

-- Field creation ---------------------------------------------------------------------

local FRAMETYPES = {}
if frametype ~= nil then
  FRAMETYPES.request_packet = frametype.REQUEST
  FRAMETYPES.response_packet = frametype.RESPONSE
end

local INT_FIELDS = {
  uint8 = ProtoField.uint8, uint16 = ProtoField.uint16, uint32 = ProtoField.uint32,
  uint64 = ProtoField.uint64, int8 = ProtoField.int8, int16 = ProtoField.int16,
  int32 = ProtoField.int32, int64 = ProtoField.int64,
}

-- entry: a row of SPEC.names, { flat name, ftype, title, doc, enum = ..., display = ..., mask = ... }.
local function make_field(entry)
  local abbr = SPEC.name .. "." .. entry[1]
  local t, label, doc = entry[2], entry[3], entry[4]
  if t == "none" then return ProtoField.none(abbr, label, doc) end
  if t == "string" then return ProtoField.string(abbr, label, base.UNICODE, doc) end
  if t == "bytes" then return ProtoField.bytes(abbr, label, base.NONE, doc) end
  if t == "bool" then return ProtoField.bool(abbr, label, base.NONE, nil, nil, doc) end
  if t == "double" then return ProtoField.double(abbr, label, doc) end
  if t == "ipv4" then return ProtoField.ipv4(abbr, label, doc) end
  if t == "ipv6" then return ProtoField.ipv6(abbr, label, doc) end
  local display = entry.display
  if display == "packet" or display == "request_packet" or display == "response_packet" then
    return ProtoField.framenum(abbr, label, base.NONE, FRAMETYPES[display], nil, doc)
  end
  local vs = entry.enum and VS[entry.enum] or nil
  local b = base.DEC
  if display == "hex" and t:sub(1, 1) == "u" then b = base.HEX end
  return INT_FIELDS[t](abbr, label, b, vs, entry.mask, doc)
end

local all_fields = {}
for _, entry in ipairs(SPEC.names) do
  F[entry[1]] = make_field(entry)
  NAME_TITLE[entry[1]] = entry[3]
  all_fields[#all_fields + 1] = F[entry[1]]
end
P.fields = all_fields

-- The registry's groups are Wireshark's (core/findings.py), so Expert Info files a note under
-- the group Wireshark's own dissectors would.
local GROUPS = {
  malformed = expert.group.MALFORMED, response_code = expert.group.RESPONSE_CODE,
  sequence = expert.group.SEQUENCE, protocol = expert.group.PROTOCOL,
  undecoded = expert.group.UNDECODED, checksum = expert.group.CHECKSUM,
}
local SEVERITIES = {
  chat = expert.severity.CHAT, note = expert.severity.NOTE,
  warn = expert.severity.WARN, error = expert.severity.ERROR,
}
-- One entry per kind of finding and severity, as Wireshark's own dissectors register theirs:
-- Expert Info groups notes under their kind's title. Kinds and titles come from the registry's
-- findings table (core/findings.py); a kind's usual severity has the plain name.
local all_experts = {}
for _, entry in ipairs(SPEC.experts) do
  E[entry.kind] = E[entry.kind] or {}
  local e = ProtoExpert.new(SPEC.name .. ".expert." .. entry.name, entry.title,
    GROUPS[entry.group], SEVERITIES[entry.severity])
  E[entry.kind][entry.severity] = e
  all_experts[#all_experts + 1] = e
end
P.experts = all_experts

-- Under Lua 5.4 a number Wireshark hands over may be a float (3.0), which prints as "3.0":
-- counts, sizes and packet numbers become integers where the Lua has integers.
local int = function(x) return x end
if math.tointeger then
  int = function(x) return math.tointeger(x) or x end
end

if not SPEC.carried_by then
  P.prefs.ports = Pref.range("TCP ports", table.concat(SPEC.ports, ","),
    "TCP ports on which the server listens", 65535)
end

local tcp_table = DissectorTable.get("tcp.port")
local registered = nil
-- Whether a port is the server's, by port: worked out once per port from the ports preference
-- (register.lua's in_ports), and forgotten when it changes.
local port_is_server = {}

local function register_ports()
  if SPEC.carried_by then return end  -- its carrier's plugin hands it its bytes
  if registered then tcp_table:remove(registered, P) end
  registered = P.prefs.ports
  port_is_server = {}
  tcp_table:add(registered, P)
end

-- A changed ports preference (Edit > Preferences, `-o <protocol>.ports:...`) moves the
-- registration; a carried protocol has no ports of its own.
function P.prefs_changed()
  if not SPEC.carried_by and registered ~= P.prefs.ports then register_ports() end
end

-- TLS on a connection of this protocol's port (NATS upgrading after INFO, or a client that
-- starts with TLS): from the client's ClientHello on, its bytes go to Wireshark's own TLS
-- dissector, which decrypts them with its key log (tls.keylog_file) and hands the plaintext
-- back to this dissector (wiring.lua's heuristic, or tls.port), as streamdump does.
local tls_handle = Dissector.get("tls")
