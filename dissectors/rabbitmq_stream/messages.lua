-- Twin of messages.py's volume: what a Publish or Deliver frame moves, from its headers, for the
-- statistics' messages per stream: a Publish's records and entry bytes, a data chunk's records
-- and data length (tracking chunks carry no messages). Its stream is the one the publisher or
-- subscription was declared for (a link the tracker keeps).
do
  local function kept_stream(f)
    local stream = nil
    for _, pair in ipairs((f.links and f.links.kept) or {}) do
      if pair[1] == "stream" then stream = pair[2] end
    end
    if type(stream) ~= "string" or stream == "" then return "(unknown stream)" end
    return stream
  end
  MESSAGES.volume = function(frame, f, from_client)
    local fields = frame.fields or {}
    local direction = from_client == false and "deliver" or "publish"
    if frame.command == "Publish" then
      local records, size = 0, 0
      local messages = fields.messages or {}
      for i = 1, #messages do
        local message = messages[i]
        local entry = type(message) == "table" and message.entry
        if type(entry) == "table" then
          records, size = records + entry.record_count, size + entry.size
        end
      end
      return { kept_stream(f), direction, records, size }
    elseif frame.command == "Deliver" then
      local chunk = fields.chunk
      if type(chunk) ~= "table" or (chunk.chunk_type or 0) ~= 0 then return nil end
      return { kept_stream(f), direction, int(chunk.num_records or 0), int(chunk.data_length or 0) }
    end
    return nil
  end
end
