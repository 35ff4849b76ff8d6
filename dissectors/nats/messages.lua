-- Twin of messages.py's volume: what a PUB, HPUB, MSG or HMSG moves, for the statistics'
-- messages per subject: one message and its payload's bytes. A reply counts under the subject
-- of the request it answers (a link the tracker keeps): "reply" as the server delivers it,
-- "reply sent" as a responder sends it. One-off subjects count as their pattern: inboxes as
-- _INBOX.*, JetStream acknowledgements as $JS.ACK.<stream>.<consumer>.*.
do
  local CARRIERS = { Publish = "publish", HeadersPublish = "publish", Message = "deliver", HeadersMessage = "deliver" }
  local INBOX, ACK = "_INBOX.", "$JS.ACK."
  local function grouped(subject)
    if type(subject) ~= "string" then return subject end
    if subject:sub(1, #INBOX) == INBOX then return INBOX .. "*" end
    if subject:sub(1, #ACK) == ACK then
      local tokens = {}
      for token in (subject .. "."):gmatch("([^.]*)%.") do tokens[#tokens + 1] = token end
      if #tokens >= 11 then  -- with a domain and an account hash before the stream
        local short = { tokens[1], tokens[2] }
        for i = 5, #tokens do short[#short + 1] = tokens[i] end
        tokens = short
      end
      if #tokens >= 9 then return table.concat(tokens, ".", 1, 4) .. ".*" end
    end
    return subject
  end
  local function addressed(value)
    if type(value) == "string" and value ~= "" then return value end
    return "?"
  end
  MESSAGES.volume = function(frame, f, from_client)
    local verb = CARRIERS[frame.command or ""]
    if verb == nil then return nil end
    local fields = frame.fields or {}
    local size = fields.payload_size
    if type(size) ~= "number" then size = 0 end
    local asked = nil
    for _, pair in ipairs((f.links and f.links.kept) or {}) do
      if pair[1] == "request_subject" then asked = pair[2] end
    end
    if asked ~= nil then
      return { addressed(grouped(asked)), from_client and "reply sent" or "reply", 1, size }
    end
    return { addressed(grouped(fields.subject)), verb, 1, size }
  end
end
