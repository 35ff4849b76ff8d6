-- Twin of objects.py: an object store's metadata links to the chunks its sender sent before it
-- (chunks_in), a chunk after the metadata naming it links to it (object_in), and with every
-- chunk in the capture their bytes are checked against the metadata's size and SHA-256 digest.

-- SHA-256 in arithmetic only (no bit operators: Lua 5.2 to 5.4), on 32-bit words held as
-- numbers, through 4-bit lookup tables. Slow, so objects.py's MAX_HELD bounds what it hashes.
local NATS_X4, NATS_A4 = {}, {}
for a = 0, 15 do
  NATS_X4[a], NATS_A4[a] = {}, {}
  for b = 0, 15 do
    local x, y, r, s, bit = a, b, 0, 0, 1
    for _ = 1, 4 do
      local p, q = x % 2, y % 2
      if p ~= q then r = r + bit end
      if p == 1 and q == 1 then s = s + bit end
      x, y, bit = (x - p) / 2, (y - q) / 2, bit * 2
    end
    NATS_X4[a][b], NATS_A4[a][b] = r, s
  end
end
local function nats_bitop(t, a, b)
  local r, bit = 0, 1
  for _ = 1, 8 do
    local p, q = a % 16, b % 16
    r = r + t[p][q] * bit
    a, b, bit = (a - p) / 16, (b - q) / 16, bit * 16
  end
  return r
end
local function nats_xor(a, b) return nats_bitop(NATS_X4, a, b) end
local function nats_and(a, b) return nats_bitop(NATS_A4, a, b) end
local function nats_rotr(x, n)
  local low = x % 2 ^ n
  return (x - low) / 2 ^ n + low * 2 ^ (32 - n)
end
local NATS_K = {
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}
local function nats_sha256(msg)
  local h = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 }
  local bits = #msg * 8
  msg = msg .. "\128" .. string.rep("\0", (55 - #msg) % 64)
  local tail = {}
  for i = 8, 1, -1 do
    tail[i] = string.char(bits % 256)
    bits = math.floor(bits / 256)
  end
  msg = msg .. table.concat(tail)
  local M = 2 ^ 32
  for chunk = 1, #msg, 64 do
    local w = {}
    for i = 0, 15 do
      local a, b, c, d = msg:byte(chunk + i * 4, chunk + i * 4 + 3)
      w[i] = ((a * 256 + b) * 256 + c) * 256 + d
    end
    for i = 16, 63 do
      local x, y = w[i - 15], w[i - 2]
      local s0 = nats_xor(nats_xor(nats_rotr(x, 7), nats_rotr(x, 18)), math.floor(x / 8))
      local s1 = nats_xor(nats_xor(nats_rotr(y, 17), nats_rotr(y, 19)), math.floor(y / 1024))
      w[i] = (w[i - 16] + s0 + w[i - 7] + s1) % M
    end
    local a, b, c, d, e, f, g, hh = h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8]
    for i = 0, 63 do
      local S1 = nats_xor(nats_xor(nats_rotr(e, 6), nats_rotr(e, 11)), nats_rotr(e, 25))
      local ch = nats_xor(nats_and(e, f), nats_and(M - 1 - e, g))
      local t1 = (hh + S1 + ch + NATS_K[i + 1] + w[i]) % M
      local S0 = nats_xor(nats_xor(nats_rotr(a, 2), nats_rotr(a, 13)), nats_rotr(a, 22))
      local maj = nats_xor(nats_xor(nats_and(a, b), nats_and(a, c)), nats_and(b, c))
      local t2 = (S0 + maj) % M
      hh, g, f, e, d, c, b, a = g, f, e, (d + t1) % M, c, b, a, (t1 + t2) % M
    end
    h[1], h[2], h[3], h[4] = (h[1] + a) % M, (h[2] + b) % M, (h[3] + c) % M, (h[4] + d) % M
    h[5], h[6], h[7], h[8] = (h[5] + e) % M, (h[6] + f) % M, (h[7] + g) % M, (h[8] + hh) % M
  end
  local out = {}
  for i = 1, 8 do
    local v = h[i]
    out[#out + 1] = string.char(math.floor(v / 16777216) % 256, math.floor(v / 65536) % 256,
      math.floor(v / 256) % 256, v % 256)
  end
  return table.concat(out)
end

local NATS_B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
local function nats_b64url(raw)
  local out = {}
  for i = 1, #raw, 3 do
    local a, b, c = raw:byte(i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local chars = { math.floor(n / 262144) % 64, math.floor(n / 4096) % 64, math.floor(n / 64) % 64, n % 64 }
    out[#out + 1] = NATS_B64URL:sub(chars[1] + 1, chars[1] + 1) .. NATS_B64URL:sub(chars[2] + 1, chars[2] + 1)
      .. (b and NATS_B64URL:sub(chars[3] + 1, chars[3] + 1) or "=") .. (c and NATS_B64URL:sub(chars[4] + 1, chars[4] + 1) or "=")
  end
  return table.concat(out)
end

do
  local spec = CONV.rules.objects
  if spec then
    local metas, count = {}, 0  -- nuid -> the latest metadata naming it, any connection
    local function check(f, meta, chunks)
      local said
      if chunks.size ~= meta.size then
        said = string.format("its %d chunks hold %d bytes, its metadata says %d", meta.chunks, chunks.size, meta.size)
      elseif not chunks.held then
        return
      else
        local actual = "SHA-256=" .. nats_b64url(nats_sha256(table.concat(chunks.parts)))
        if actual:gsub("=+$", "") == meta.digest:gsub("=+$", "") then return end
        said = string.format("its chunks' digest is %s, its metadata says %s", actual, meta.digest)
      end
      tnote(f, "warn", "digest", string.format("object %s (metadata in packet %d): %s",
        py_repr(meta.name), meta.number, said))
    end
    CONV_RULES.objects = {
      before = function(conn, f)
        local nuid = f.fields[spec.chunk]
        if type(nuid) ~= "string" then return end
        local waiting = conn.rules.objects
        if waiting == nil then
          waiting = { n = 0 }
          conn.rules.objects = waiting
        end
        local key = side_key(f.from_client) .. nuid
        if f.fields[spec.name] ~= nil then
          local digest, chunks_n, size = f.fields[spec.digest], f.fields[spec.chunks], f.fields[spec.size]
          if type(digest) ~= "string" or not is_number(chunks_n) or not is_number(size) then return end
          local meta = { number = f.number, name = tostring(f.fields[spec.name]), digest = digest, chunks = chunks_n, size = size }
          if metas[nuid] or count < spec.max_objects then
            if not metas[nuid] then count = count + 1 end
            metas[nuid] = meta
          end
          local chunks = waiting[key]
          if chunks == nil then return end
          local list = {}
          for i, n in ipairs(chunks.numbers) do list[i] = n end
          links_of(f).chunks_in = list
          if #chunks.numbers == chunks_n then
            check(f, meta, chunks)
            waiting[key] = nil
          end
          return
        end
        local data = f.fields[spec.data]
        if type(data) ~= "table" or data.tvb == nil then return end
        local chunks = waiting[key]
        if chunks == nil then
          if waiting.n >= spec.max_objects then return end
          waiting.n = waiting.n + 1
          chunks = { numbers = {}, size = 0, parts = {}, held = true }
          waiting[key] = chunks
        end
        if #chunks.numbers < spec.max_chunks then chunks.numbers[#chunks.numbers + 1] = f.number end
        chunks.size = chunks.size + data.len
        if chunks.held and chunks.size <= spec.max_held then
          chunks.parts[#chunks.parts + 1] = data.len > 0 and data.tvb:raw(data.pos, data.len) or ""
        else
          chunks.held, chunks.parts = false, {}
        end
        local meta = metas[nuid]
        if meta and meta.number < f.number then
          links_of(f).object_in = meta.number
          if #chunks.numbers == meta.chunks then
            check(f, meta, chunks)
            waiting[key] = nil
          end
        end
      end,
    }
  end
end
