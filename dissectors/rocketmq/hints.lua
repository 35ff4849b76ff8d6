-- Twin of hints.py: what a failed request's code means for its command, added to the finding.
do
  local spec = CONV.rules.hints
  if spec then
    CONV_RULES.hints = {
      explain = function(conn, f, request, code)
        local hint = spec[f.command or ""] and spec[f.command][code]
        return hint and (": " .. hint) or ""
      end,
    }
  end
end
