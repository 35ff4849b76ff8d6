-- RabbitMQ Streams' own preferences, declared as the plugin loads (osiris.lua reads them).

-- The chunk CRC is a large part of a -V run over Deliver traffic (about 25 ns a byte in Lua 5.2,
-- tshark 4.0: codecs/zlib.lua), so it can be turned off as Wireshark's own checksum
-- preferences turn theirs off; on by default, as streamdump always checks it.
P.prefs.check_crc = Pref.bool("Validate chunk CRCs", true,
  "Work out each Deliver chunk's CRC-32 over its data and compare it with the one its header gives")
