-- Lua twin of dissectors/eventmesh/framing.py: where an EventMesh frame ends. The message
-- length counts 8 + header + body up to 1.8 (the frame is length + 13) and 13 + header +
-- body from 1.9 (length + 8); the next frame's magic after a candidate end confirms it,
-- an end the bytes rule the other out for is taken, bytes that stop exactly at the 1.9 end
-- take it if the body is whole, and a length that fits neither ends at the next magic.

local EM_MAGIC = "EventMesh0000"
local EM_PREFIX = #EM_MAGIC + 8
-- What the message length leaves out of the frame, and what length_counts says: 1.9, then 1.8.
local EM_CONVENTIONS = { { 8, "1.9: 13 + header + body" }, { 13, "1.8: 8 + header + body" } }
local EM_CLOSERS = { ["{"] = "}", ["["] = "]", ['"'] = '"' }

-- Bodies up to this size are parsed to tell a whole one from one 5 bytes short.
local EM_PARSE_LIMIT = 64 * 1024

local function em_looks_whole(tvb, pos, len)
  if len <= 0 then return true end
  local raw = tvb:raw(pos, len)
  local first = raw:find("%S")
  if first == nil then return true end
  local last = #raw
  while last > first and raw:find("^%s", last) do last = last - 1 end
  local text = raw:sub(first, last)
  local closer = EM_CLOSERS[text:sub(1, 1)]
  if closer == nil then return true end
  if #text > EM_PARSE_LIMIT then return #text > 1 and text:sub(-1) == closer end
  if not utf8_valid(text) then return false end
  return (pcall(json_parse, text))
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
  local length, header_length = tvb(at + #EM_MAGIC, 4):int(), tvb(at + #EM_MAGIC + 4, 4):int()
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
  local length, header_length = tvb(offset + #EM_MAGIC, 4):int(), tvb(offset + #EM_MAGIC + 4, 4):int()
  if length < 0 or header_length < 0 or header_length > SPEC.max_size - EM_PREFIX then return em_skip(tvb, offset) end
  local ends = {}
  for _, c in ipairs(EM_CONVENTIONS) do
    local extra = c[1]
    local e = length + extra
    if e >= EM_PREFIX + header_length and e <= SPEC.max_size then ends[#ends + 1] = e end
  end
  -- One possible end is the end; with two, the bytes up to the first say nothing yet (a length
  -- asked for would be taken as the frame's, and a 1.8 frame is 5 bytes longer).
  if #ends == 1 and avail < ends[1] then return ends[1] end
  if #ends > 1 and avail < ends[1] then return 0 end
  for _, e in ipairs(ends) do
    if avail >= e + #EM_MAGIC and em_magic_at(tvb, offset + e, avail_end) then return e end
  end
  -- The ends still possible: not reached, reached exactly, or followed by the start of a magic.
  local alive = {}
  for _, e in ipairs(ends) do
    if avail <= e or em_magic_prefix(tvb, offset + e, avail_end) then alive[#alive + 1] = e end
  end
  if #alive == 1 then return alive[1] end  -- the other end is ruled out: this is the frame's
  if #alive > 1 then
    -- The bytes stop at the 1.9 end or just after it, where a magic may begin; up to 1.8 the
    -- frame would go on 5 bytes: take the 1.9 end if the body ends there whole.
    local body = offset + EM_PREFIX + header_length
    return em_looks_whole(tvb, body, offset + ends[1] - body) and ends[1] or 0
  end
  -- Neither end is followed by a frame: the length fits neither convention when a frame
  -- starts before them (or when they are impossible), else bytes that are no frame follow.
  local from = offset + EM_PREFIX + (#ends > 0 and header_length or 0)
  local last = #ends > 0 and math.min(avail_end, offset + ends[1] + #EM_MAGIC - 1) or avail_end
  if from < last then
    local text = tvb:raw(from, last - from)
    local i = text:find(EM_MAGIC, 1, true)
    while i do
      local at = from + i - 1
      if avail_end - at < EM_PREFIX then return 0 end
      if em_plausible(tvb, at) then return at - offset end
      i = text:find(EM_MAGIC, i + 1, true)
    end
  end
  if #ends > 0 then return ends[1] end  -- what follows is passed over
  return avail <= SPEC.max_size and 0 or -1
end
