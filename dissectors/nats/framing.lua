-- Lua twin of dissectors/nats/framing.py: where a NATS frame ends. A frame is a control line
-- (CRLF, or a bare LF), and for PUB, HPUB, MSG and HMSG the bytes the line's last word counts
-- and a CRLF; a line that counts nothing readable, or is not the protocol, is a frame alone.

local NATS_COUNTED = { PUB = true, HPUB = true, MSG = true, HMSG = true }
local NATS_MAX_LINE = 64 * 1024

FRAMING.pdu_length = function(tvb, offset)
  local avail = int(tvb:len()) - offset
  local look = avail < NATS_MAX_LINE + 2 and avail or NATS_MAX_LINE + 2
  local text = look > 0 and tvb:raw(offset, look) or ""
  local nl = text:find("\n", 1, true)
  if not nl then return avail > NATS_MAX_LINE and -1 or 0 end
  local line = text:sub(1, nl - 1)
  local op = (line:match("^[ \t]*([^ \t\r]+)") or ""):upper()
  if not NATS_COUNTED[op] then return nl end
  local counted = line:match("([0-9]+)[ \t]*\r?$")
  if counted == nil then return nl end
  counted = tonumber(counted)
  if counted > SPEC.max_size then return nl end
  return nl + counted + 2
end
