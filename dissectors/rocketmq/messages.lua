-- Twin of messages.py's volume: what producers send (SEND_MESSAGE, SEND_MESSAGE_V2: one message;
-- SEND_BATCH_MESSAGE: several) and what frames holding stored messages hand out (a pull's
-- answer), for the statistics' messages per topic: the messages and their bodies' bytes as sent.
do
  local SENDS = { SEND_MESSAGE = true, SEND_MESSAGE_V2 = true }
  local function addressed(value)
    if type(value) == "string" and value ~= "" then return value end
    return "?"
  end
  local function size(body)
    if type(body) == "table" then return body.len or 0 end
    if type(body) == "string" then return #body end
    return 0
  end
  local function bodies(messages)
    local total = 0
    for _, m in ipairs(messages) do total = total + size(type(m) == "table" and m.message_body or nil) end
    return total
  end
  MESSAGES.volume = function(frame)
    local fields = frame.fields or {}
    if frame.kind ~= "response" and SENDS[frame.command] then
      return { addressed(fields.topic), "send", 1, size(fields.body) }
    end
    if frame.kind ~= "response" and frame.command == "SEND_BATCH_MESSAGE" then
      local messages = type(fields.batch_messages) == "table" and fields.batch_messages or {}
      return { addressed(fields.topic), "send", #messages, bodies(messages) }
    end
    local messages = fields.messages
    if type(messages) ~= "table" or #messages == 0 then return nil end
    return { addressed(type(messages[1]) == "table" and messages[1].topic or nil), "pull", #messages, bodies(messages) }
  end
end
