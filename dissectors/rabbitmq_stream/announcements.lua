-- Twin of announcements.py: what the broker announces about a stream, and the later findings
-- it explains.
do
  local spec = CONV.rules.announcement
  if spec then
    local names = VS[spec.enum] or {}
    local rule = {}
    function rule.feed(conn, f)
      if f.command ~= spec.command then return end
      local code, subject = f.fields[spec.code], f.fields[spec.about]
      if not is_number(code) or type(subject) ~= "string" or OK[code] then return end
      local what = named(names, code)
      conn.rules.announcement = conn.rules.announcement or {}
      conn.rules.announcement[subject] = { f.number, what }
      tnote(f, "note", "announcement", string.format("the %s announced %s %s: %s", server_of(conn), spec.about,
        quoted(subject), what))
    end
    -- What the broker had announced about the subject these values name, as words for a finding.
    function rule.said(conn, values)
      if values == nil then return "" end
      local subject = values[spec.about]
      local announced = conn.rules.announcement
      local said = type(subject) == "string" and announced and announced[subject] or nil
      if said == nil then return "" end
      return string.format("; at packet %d the %s had announced %s %s: %s", said[1], server_of(conn), spec.about,
        quoted(subject), said[2])
    end
    function rule.explain(conn, f, request, code)
      return rule.said(conn, request and request.fields)
    end
    CONV_RULES.announcement = rule
  end
end
