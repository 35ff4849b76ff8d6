-- Lua twin of dissectors/eventmesh/framing.py: where an EventMesh frame ends. The message
-- length counts 8 + header + body up to 1.8 (the frame is length + 13) and 13 + header +
-- body from 1.9 (length + 8); the next frame's magic after a candidate end confirms it,
-- bytes that stop exactly at an end take it if the body looks whole, and a length that
-- fits neither ends where the next magic starts.

local EM_MAGIC = "EventMesh0000"
local EM_PREFIX = #EM_MAGIC + 8
local EM_CLOSERS = { ["{"] = "}", ["["] = "]", ['"'] = '"' }

local function em_looks_whole(tvb, pos, len)
  if len <= 0 then return true end
  local text = tvb:raw(pos, len):match("^%s*(.-)%s*$")
  if text == "" then return true end
  local closer = EM_CLOSERS[text:sub(1, 1)]
  return closer == nil or (#text > 1 and text:sub(-1) == closer)
end

local function em_magic_at(tvb, at, avail_end)
  return at + #EM_MAGIC <= avail_end and tvb:raw(at, #EM_MAGIC) == EM_MAGIC
end

-- Whether the bytes from at to the end are the start of a magic.
local function em_magic_prefix(tvb, at, avail_end)
  local n = avail_end - at
  if n <= 0 then return true end
  if n > #EM_MAGIC then n = #EM_MAGIC end
  return tvb:raw(at, n) == EM_MAGIC:sub(1, n)
end

local function em_plausible(tvb, at)
  if at + EM_PREFIX > int(tvb:len()) or tvb:raw(at, #EM_MAGIC) ~= EM_MAGIC then return false end
  local length, header_length = tvb(at + 13, 4):int(), tvb(at + 17, 4):int()
  return length >= 0 and header_length >= 0 and header_length <= SPEC.max_size - EM_PREFIX
end

-- Bytes that start no frame run to the next magic (the rest, when none follows), so the
-- frames after them in the same segment are still found.
local function em_skip(tvb, offset)
  local avail_end = int(tvb:len())
  if offset + 1 >= avail_end then return -1 end
  local i = tvb:raw(offset + 1, avail_end - offset - 1):find(EM_MAGIC, 1, true)
  if i then return i end
  return -1
end

FRAMING.pdu_length = function(tvb, offset)
  local avail_end = int(tvb:len())
  local avail = avail_end - offset
  if avail < #EM_MAGIC then
    return em_magic_prefix(tvb, offset, avail_end) and 0 or -1
  end
  if not em_magic_at(tvb, offset, avail_end) then return em_skip(tvb, offset) end
  if avail < EM_PREFIX then return 0 end
  local length, header_length = tvb(offset + 13, 4):int(), tvb(offset + 17, 4):int()
  if length < 0 or header_length < 0 or header_length > SPEC.max_size - EM_PREFIX then return em_skip(tvb, offset) end
  local ends = {}
  for _, extra in ipairs({ 8, 13 }) do
    local e = length + extra
    if e >= EM_PREFIX + header_length and e <= SPEC.max_size then ends[#ends + 1] = e end
  end
  -- One possible end is the end; with two, reassembly brings more bytes until one is confirmed.
  if #ends == 1 and avail < ends[1] then return ends[1] end
  if #ends > 1 and avail < ends[1] then return 0 end
  for _, e in ipairs(ends) do
    if avail >= e + #EM_MAGIC and em_magic_at(tvb, offset + e, avail_end) then return e end
  end
  local function is_end(n)
    for _, e in ipairs(ends) do if e == n then return true end end
    return false
  end
  if is_end(avail) then
    if avail == ends[1] and #ends > 1 then
      -- Up to 1.8 the frame would go on 5 bytes: take this end only if the body ends here.
      local body = offset + EM_PREFIX + header_length
      return em_looks_whole(tvb, body, offset + avail - body) and avail or 0
    end
    if avail ~= ends[1] and em_magic_prefix(tvb, offset + ends[1], avail_end) then
      return 0  -- the next frame may start at the 1.9 end: its magic will say
    end
    return avail
  end
  -- The next frame's magic somewhere else: this length fits neither convention.
  local from = offset + EM_PREFIX + (#ends > 0 and header_length or 0)
  if from < avail_end then
    local text = tvb:raw(from, avail_end - from)
    local i = text:find(EM_MAGIC, 1, true)
    while i do
      local at = from + i - 1
      if not is_end(at - offset) then
        if avail_end - at < EM_PREFIX then return 0 end
        if em_plausible(tvb, at) then return at - offset end
      end
      i = text:find(EM_MAGIC, i + 1, true)
    end
  end
  local alive = #ends == 0
  for _, e in ipairs(ends) do
    if avail < e or em_magic_prefix(tvb, offset + e, avail_end) then alive = true end
  end
  if alive then return avail <= SPEC.max_size and 0 or -1 end
  return ends[1]
end
