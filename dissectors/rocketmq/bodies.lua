-- Lua twin of dissectors/rocketmq/bodies.py: a stored message body's CRC (masked to 31
-- bits), and a body the producer compressed, inflated when Wireshark's Lua can (zlib;
-- lz4 and zstd get an "undecoded" note, as Wireshark 4.0's Lua has no codec for them),
-- within the frame's expansion budget.

local function body_expand(tvb, pos, len, tree, ctx, siblings)
  local sys_flag = siblings.sys_flag
  if type(sys_flag) ~= "number" or sys_flag % 2 == 0 then return end
  local code = math.floor(sys_flag / 256) % 8
  siblings.compression = code
  if tree then tree:add(F.compression, tvb(pos, len), code):set_generated() end
  local codec = VS.compression[code]
  if codec == nil then
    note(ctx, "warn", "malformed", "message body: unknown compression type " .. code .. " in sys_flag")
    return
  end
  if codec ~= "zlib" then
    note(ctx, "note", "undecoded", "message body: " .. codec .. " is not inflated here (Wireshark's Lua has no codec for it)")
    return
  end
  local out = inflate(tvb, pos, len, "uncompressed body")
  if out == nil then
    note(ctx, "warn", "malformed", "message body: zlib data is corrupt")
    return
  end
  local budget = budget_of(ctx)
  if out:len() > budget.bytes then
    -- Wireshark inflated it already; what the budget bounds is what is shown and kept.
    budget_refuse(ctx, "message body", codec .. " body not inflated")
    return
  end
  budget.bytes = budget.bytes - out:len()
  siblings.uncompressed_body = true
  if tree then tree:add(F.uncompressed_body, out()) end
end

HOOKS.message_body = {
  -- A frame's body (SEND_MESSAGE): only compression applies.
  raw = function(spec, tvb, pos, len, tree, ctx, siblings)
    if tree then tree:add(F[spec.name], tvb(pos, len)) end
    body_expand(tvb, pos, len, tree, ctx, siblings)
  end,
  -- A stored or batch message's body (its bytes field): CRC, then compression.
  value = function(spec, value, tree, ctx, siblings)
    local tvb, pos, len = value.tvb, value.pos, value.len
    local crc = siblings.body_crc
    if type(crc) == "number" and siblings.magic_code and siblings.magic_code ~= 0 and P.prefs.check_crc then
      local actual = crc32(tvb, pos, len) % 0x80000000
      siblings.body_crc_valid = crc == actual
      if tree then tree:add(F.body_crc_valid, tvb(pos, len), crc == actual):set_generated() end
      if crc ~= actual then
        note(ctx, "error", "malformed", string.format(
          "message body CRC mismatch: header says 0x%08x, body gives 0x%08x", crc, actual))
      end
    end
    body_expand(tvb, pos, len, tree, ctx, siblings)
  end,
}
