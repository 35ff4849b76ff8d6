-- Twin of tune.py: the frame size the peers negotiated in Tune, and frames over it. (Silences
-- longer than the heartbeat need the end of the capture, which only the Python side has.)
do
  local spec = CONV.rules.tune
  if spec then
    CONV_RULES.tune = {
      before = function(conn, f)
        local negotiated = conn.rules.tune  -- { frame_max, the packet of the client's Tune }
        if negotiated and negotiated[1] > 0 and f.length > negotiated[1] then
          if f.from_client then conn.suspects.oversized = f end
          tnote(f, "error", "frame_max", string.format(
            "%s frame of %d bytes exceeds the frame_max of %d bytes negotiated at packet %d",
            f.command or string.format("Unknown(%s)", key_text(f.key)), f.length, negotiated[1], negotiated[2]))
        end
      end,
      feed = function(conn, f)
        if f.command ~= spec.command then return end
        local frame_max, heartbeat = f.fields[spec.frame_max], f.fields[spec.heartbeat]
        if is_number(frame_max) and is_number(heartbeat) and f.from_client then
          conn.rules.tune = { frame_max, f.number }
        end
      end,
    }
  end
end
