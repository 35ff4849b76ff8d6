-- Twin of credit.py: the credit each subscription has left (credit_left on each delivery), and
-- the broker's refusal of a grant, linked to the grant it answers.
do
  local spec = CONV.rules.credit
  if spec then
    local session = CONV.sessions[spec.session]
    local grants = {}
    for _, ref in ipairs(spec.grant) do grants[ref.command] = ref end
    local function state(conn)
      local s = conn.rules.credit
      if s == nil then
        s = { left = {}, last_grant = {} }
        conn.rules.credit = s
      end
      return s
    end
    CONV_RULES.credit = {
      feed = function(conn, f)
        local sid = f.fields[session.id]
        if not is_number(sid) then return end
        local s = state(conn)
        local grant = grants[f.command]
        if grant and f.kind ~= "response" then
          local amount = f.fields[grant.path[1]]
          if not is_number(amount) then return end
          s.last_grant[sid] = f
          if f.command == session.open then
            s.left[sid] = amount
          elseif s.left[sid] ~= nil then
            s.left[sid] = s.left[sid] + amount
          end
        elseif f.command == spec.spend then
          local left = s.left[sid]
          if left == nil or left == 0 then return end
          s.left[sid] = left - 1
          links_of(f).credit_left = left - 1
        elseif f.command == session.close and f.kind == "request" then
          s.left[sid] = nil
        end
      end,
      status = function(conn, f, request, code, what)
        if request ~= nil or f.command ~= spec.refusal then return false end
        local sid = f.fields[session.id]
        local grant = sid ~= nil and state(conn).last_grant[sid] or nil
        local where = ""
        if grant then
          local links = links_of(f)
          links.request_in = grant.number
          links.response_time = round6(f.ts - grant.ts)
          links_of(grant).response_in = f.number
          where = " (packet " .. grant.number .. ")"
        end
        tnote(f, "warn", "error_response",
          string.format("%s for subscription %s%s refused: %s", f.command, tostring(sid), where, what))
        return true
      end,
    }
  end
end
