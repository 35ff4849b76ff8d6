-- Twin of messages.py's volume: a Publish envelope moves one message, its value's bytes, to its
-- stream, for the statistics' messages per stream.
do
  MESSAGES.volume = function(frame)
    if frame.command ~= "Publish" then return nil end
    local fields = frame.fields or {}
    local stream, value = fields.stream, fields.value
    if type(stream) ~= "string" or stream == "" then stream = "?" end
    local size = 0
    if type(value) == "table" then size = value.len elseif type(value) == "string" then size = #value end
    return { stream, "publish", 1, size }
  end
end
