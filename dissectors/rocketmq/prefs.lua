-- RocketMQ's own preferences, declared as the plugin loads (bodies.lua reads them).

-- A stored message's body CRC, as RabbitMQ Streams' chunk CRC: a preference turns it off (in
-- Lua 5.2, tshark 4.0, about 25 ns a byte); on by default, as streamdump always checks it.
P.prefs.check_crc = Pref.bool("Validate message body CRCs", true,
  "Work out each stored message's body CRC-32 and compare it with the one its header gives")
