-- Twin of messages.py's volume: a message published, pushed, requested or replied moves one
-- message, the package's bytes after its header, to its topic, for the statistics' messages per
-- topic. Acknowledgements echo a message but are not one.
do
  local CARRIERS = {
    ["AsyncMessage request"] = "publish", ["Broadcast request"] = "broadcast",
    ["SyncRequest request"] = "request", ["SyncReply command"] = "reply",
    ["AsyncPush request"] = "push", ["BroadcastPush request"] = "push broadcast",
    ["SyncPush request"] = "push request", ["SyncRequest response"] = "push reply",
  }
  local PREFIX = 13 + 8  -- the magic and version, the message's and the header's lengths
  MESSAGES.volume = function(frame, f, from_client, whole)
    local verb = CARRIERS[tostring(frame.command) .. " " .. tostring(frame.kind)]
    if verb == nil then return nil end
    local fields = frame.fields or {}
    local header = fields.header_length
    local body = type(header) == "number" and whole - PREFIX - header or 0
    local topic = fields.topic
    if type(topic) ~= "string" or topic == "" then topic = "?" end
    return { topic, verb:sub(1, 4) == "push" and "push" or "publish", 1, math.max(body, 0) }
  end
end
