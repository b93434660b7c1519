-- Wireshark dissector for pub0sub: the client protocol (opcodes 0x20-0x33), the mesh v1 frames
-- (the seed's opcodes 1-6) and the mesh v2 frames (0x0F-0x12) when they are seen in clear.
-- Mesh v3 frames (0x13-0x1D) are named, their bodies shown as bytes (not dissected yet).
--
-- Install: copy this file to ~/.local/lib/wireshark/plugins/ (or run
--   tshark -X lua_script:deploy/wireshark/pub0sub.lua -r capture.pcap -Y pub0sub
-- ). It finds the protocol on any TCP port by a heuristic (a known opcode, a sane length, the
-- fixed sizes some frames have); 7420 is registered too. Every frame is a 5-byte header
-- (u8 opcode, u32 big-endian body length) and a body; the field names follow
-- `pub0sub decode --json` (docs/decoder.md): pub0sub.opcode, pub0sub.topic, pub0sub.sub_id, ...
-- The byte layouts are wire/schema.py's, described in docs/protocol.md.
-- Mesh v2 travels inside libp2p's Noise encryption: no capture shows it; see docs/decoder.md.

local p0 = Proto("pub0sub", "pub0sub")

local HEADER = 5
local MAX_BODY = 64 * 1024 * 1024

local OPCODES = {
  [0x01] = "HEARTBEAT", [0x02] = "SUBSCRIBE", [0x03] = "SUBSCRIBE_ACK", [0x04] = "UNSUBSCRIBE",
  [0x05] = "UNSUBSCRIBE_ACK", [0x06] = "FORWARD", [0x0E] = "ROUTED_SETS_HEADERS", [0x0F] = "FORWARD_BATCH_HEADERS",
  [0x10] = "MESH_HELLO", [0x11] = "FORWARD_BATCH", [0x12] = "FORWARD_ACK",
  [0x13] = "LINK_STATE", [0x14] = "ROUTED_SETS", [0x15] = "ROUTED", [0x16] = "INTEREST", [0x17] = "WATCH",
  [0x18] = "INTEREST_SET", [0x19] = "JOINED", [0x1A] = "HEADS", [0x1B] = "SYNC", [0x1C] = "REPAIR",
  [0x1D] = "REPAIRED",
  [0x20] = "HELLO", [0x21] = "WELCOME", [0x22] = "PUBLISH", [0x23] = "PUBLISH_ACK", [0x24] = "SUB",
  [0x25] = "SUB_OK", [0x26] = "UNSUB", [0x27] = "SUB_UPDATE", [0x28] = "DELIVER", [0x29] = "ACK",
  [0x2A] = "CREDIT", [0x2B] = "GAP", [0x2C] = "SUB_END", [0x2D] = "ERROR", [0x2E] = "STATUS",
  [0x2F] = "STATUS_REPLY", [0x30] = "COMMIT", [0x31] = "COMMITTED", [0x32] = "DELIVER_HEADERS",
  [0x33] = "KEY_FILTER",
}

-- Enum names, as wire/ defines them (tests/test_wireshark.py checks they agree).
local PUBLISH_FLAGS = { [0] = "NONE", [1] = "ACK", [2] = "HEADERS", [3] = "ACK|HEADERS" }
local ACK_STATUS = { [0] = "STORED", [1] = "DUPLICATE" }
local START_POSITION = { [0] = "LATEST", [1] = "EARLIEST", [2] = "OFFSET", [3] = "TIMESTAMP" }
local ACK_MODE = { [0] = "NONE", [1] = "EXPLICIT" }
local SLOW_CONSUMER_POLICY = { [0] = "CANCEL", [1] = "DROP_OLDEST" }
local UPDATE_OP = { [1] = "ADD", [2] = "REMOVE" }
local ERROR_CODE = {
  [1] = "MALFORMED_FRAME", [2] = "UNKNOWN_OPCODE", [3] = "FRAME_TOO_LARGE", [4] = "UNEXPECTED_FRAME",
  [5] = "LIMIT_EXCEEDED", [6] = "INVALID_TOPIC", [7] = "UNKNOWN_SUBSCRIPTION", [8] = "NOT_AUTHORIZED",
  [9] = "OUT_OF_CAPACITY", [10] = "UNSUBSCRIBED", [11] = "HEARTBEAT_TIMEOUT", [12] = "SHUTTING_DOWN",
  [13] = "CHECKSUM_MISMATCH", [14] = "TRUNCATED", [15] = "DUPLICATE_SUBSCRIPTION", [16] = "POSITION_UNAVAILABLE",
  [17] = "STORAGE_ERROR", [18] = "INTERNAL", [19] = "UNSUPPORTED_VERSION", [20] = "INVALID_ACK",
  [21] = "INVALID_QUERY",
}

local F = {}
local function field(kind, name, label, ...)
  F[name] = ProtoField[kind]("pub0sub." .. name, label, ...)
end

field("uint8", "opcode", "Opcode", base.HEX, OPCODES)
field("string", "name", "Frame")
field("uint32", "length", "Body length", base.DEC)
-- names, topics, text
for _, n in ipairs({ "topic", "pattern", "client_name", "hub_name", "durable", "group", "reason", "word", "query" }) do
  field("string", n, n)
end
-- binary values
for _, n in ipairs({ "key", "data", "token", "document" }) do field("bytes", n, n) end
field("string", "header_name", "Header")
field("bytes", "key_prefix", "Key prefix")
field("uint8", "key_all", "Every key", base.DEC, { [0] = "false", [1] = "true" })
field("uint8", "key_op", "Key filter op", base.DEC, { [1] = "ADD", [2] = "REMOVE", [3] = "SET" })
field("uint8", "parts", "SUB parts (1 key filter, 2 query)", base.DEC)
field("bytes", "header_value", "Header value")
field("bytes", "v3_body", "Mesh v3 body (not dissected)")
-- hub ids, shown as 16 hex digits like everywhere else
field("uint64", "hub_id", "Hub id", base.HEX)
field("uint64", "origin", "Origin hub id", base.HEX)
for _, n in ipairs({ "producer_id", "sequence", "timestamp", "first_offset", "last_offset", "start_value",
                     "offset", "base_offset", "origin_seq", "dropped", "ref", "seq" }) do
  field("uint64", n, n, base.DEC)
end
for _, n in ipairs({ "sub_id", "max_body", "heartbeat_ms", "count", "num", "credit", "ack_wait_ms" }) do
  field("uint32", n, n, base.DEC)
end
field("uint16", "version", "Version", base.DEC)
field("uint8", "flags", "Flags", base.DEC, PUBLISH_FLAGS)
field("uint8", "status", "Status", base.DEC, ACK_STATUS)
field("uint8", "start", "Start", base.DEC, START_POSITION)
field("uint8", "ack_mode", "Ack mode", base.DEC, ACK_MODE)
field("uint8", "policy", "Slow-consumer policy", base.DEC, SLOW_CONSUMER_POLICY)
field("uint8", "op", "Update", base.DEC, UPDATE_OP)
field("uint8", "success", "Success", base.DEC, { [0] = "false", [1] = "true" })
field("uint16", "code", "Error code", base.DEC, ERROR_CODE)

local list = {}
for _, f in pairs(F) do table.insert(list, f) end
p0.fields = list

local ef_malformed = ProtoExpert.new("pub0sub.malformed", "Malformed pub0sub frame", expert.group.MALFORMED,
                                     expert.severity.ERROR)
p0.experts = { ef_malformed }

-- A cursor over one frame body: each reader adds its field and moves on; running past the body
-- end raises, and the frame is marked malformed.
local Body = {}
Body.__index = Body

local function body(tvb, pos, stop) return setmetatable({ tvb = tvb, pos = pos, stop = stop }, Body) end

function Body:take(n)
  if self.pos + n > self.stop then error("body ends " .. (self.pos + n - self.stop) .. " bytes early") end
  local r = self.tvb(self.pos, n)
  self.pos = self.pos + n
  return r
end

function Body:int(tree, name, n)
  local r = self:take(n)
  if name then tree:add(F[name], r) end
  return n == 8 and r:uint64() or r:uint()
end

function Body:count(tree, n, label)
  local r = self:take(n)
  tree:add(r, label .. ": " .. r:uint())
  return r:uint()
end

function Body:text(tree, name, n)  -- [uN length][UTF-8]
  local len = self:take(n):uint()
  if len == 0 then
    tree:add(F[name], self.tvb(self.pos, 0), "")
    return ""
  end
  local r = self:take(len)
  local s = r:string(ENC_UTF_8)
  tree:add(F[name], r, s)
  return s
end

function Body:blob(tree, name, n)  -- [uN length][bytes]
  local len = self:take(n):uint()
  local r = len > 0 and self:take(len) or self.tvb(self.pos, 0)
  tree:add(F[name], r)
end

function Body:topics(tree, name, n)  -- [uN count] topics
  for _ = 1, self:count(tree, n, name .. " count") do self:text(tree, name, 1) end
end

-- A record region: [u32 count][u32 bytes] then records [u16 key len][u32 data len][key][data].
-- ``base`` (a record batch's base offset) numbers the records as `decode --json` does.
function Body:records(tree, base)
  local count = self:int(tree, "count", 4)
  local size = self:count(tree, 4, "records length")
  local stop = self.pos + size
  for i = 0, count - 1 do
    local start = self.pos
    local key_len = self:take(2):uint()
    local data_len = self:take(4):uint()
    local rec = tree:add(self.tvb(start, 6 + key_len + data_len), "Record " .. i)
    if base then rec:add(F.offset, self.tvb(start, 6), base + i):set_generated() end
    rec:add(F.key, key_len > 0 and self:take(key_len) or self.tvb(self.pos, 0))
    rec:add(F.data, data_len > 0 and self:take(data_len) or self.tvb(self.pos, 0))
  end
  if self.pos ~= stop then error("records length says " .. size .. " bytes") end
end

-- A headers block: [u16 length] then entries [u8 name len][name][u8 kind][u16 value len][value].
function Body:headers(tree)
  local size = self:count(tree, 2, "headers length")
  local stop = self.pos + size
  while self.pos < stop do
    local entry = tree:add(self.tvb(self.pos, 0), "Header")
    self:text(entry, "header_name", 1)
    entry:add(self:take(1), "kind: " .. (self.tvb(self.pos - 1, 1):uint() == 0 and "text" or "bytes"))
    self:blob(entry, "header_value", 2)
  end
  if self.pos ~= stop then error("headers length says " .. size .. " bytes") end
end

-- A key filter: [u8 all] then [u16 count] keys and [u16 count] prefixes, each [u16 len][bytes].
function Body:key_filter(tree)
  local f = tree:add(self.tvb(self.pos, 0), "Key filter")
  self:int(f, "key_all", 1)
  for _ = 1, self:count(f, 2, "key count") do self:blob(f, "key", 2) end
  for _ = 1, self:count(f, 2, "prefix count") do self:blob(f, "key_prefix", 2) end
end

function Body:message_set(tree)
  local set = tree:add(self.tvb(self.pos, 0), "Message set")
  self:topics(set, "topic", 1)
  self:records(set, nil)
end

function Body:record_batch(tree)
  local batch = tree:add(self.tvb(self.pos, 0), "Record batch")
  self:text(batch, "topic", 1)
  local base = self:int(batch, "base_offset", 8)
  self:int(batch, "timestamp", 8)
  self:int(batch, "origin", 8)
  self:int(batch, "origin_seq", 8)
  self:records(batch, base)
end

function Body:each(tree, n, label, read)
  for i = 1, self:count(tree, n, label .. " count") do
    read(tree:add(self.tvb(self.pos, 0), label .. " " .. i))
  end
end

local BODIES = {
  [0x01] = function(b, t) t:add(F.word, b:take(4)) end,
  [0x02] = function(b, t) while b.pos < b.stop do b:text(t, "topic", 1) end end,
  [0x03] = function(b, t) b:int(t, "success", 1) end,
  [0x04] = function(b, t) while b.pos < b.stop do b:text(t, "topic", 1) end end,
  [0x05] = function(b, t) b:int(t, "success", 1) end,
  [0x06] = function(b, t) b:topics(t, "topic", 1); b:blob(t, "data", 4) end,
  [0x10] = function(b, t)
    b:int(t, "hub_id", 8)
    b:each(t, 2, "position", function(p) b:int(p, "origin", 8); b:int(p, "seq", 8) end)
  end,
  [0x11] = function(b, t)
    b:int(t, "origin", 8)
    b:each(t, 2, "set", function(s) b:int(s, "origin_seq", 8); b:int(s, "timestamp", 8); b:message_set(s) end)
  end,
  [0x12] = function(b, t) b:int(t, "origin", 8); b:int(t, "seq", 8) end,
  [0x0F] = function(b, t)
    b:int(t, "origin", 8)
    b:each(t, 2, "set", function(s)
      b:int(s, "origin_seq", 8); b:int(s, "timestamp", 8); b:headers(s); b:message_set(s)
    end)
  end,
  [0x20] = function(b, t) b:int(t, "version", 2); b:text(t, "client_name", 1); b:blob(t, "token", 2) end,
  [0x21] = function(b, t)
    b:int(t, "version", 2); b:int(t, "hub_id", 8); b:int(t, "max_body", 4); b:int(t, "heartbeat_ms", 4)
    b:text(t, "hub_name", 1)
  end,
  [0x22] = function(b, t)
    b:int(t, "producer_id", 8); b:int(t, "sequence", 8)
    local headered = b:int(t, "flags", 1) >= 2  -- flag HEADERS: a headers block before every set
    b:each(t, 2, "set", function(s)
      if headered then b:headers(s) end
      b:message_set(s)
    end)
  end,
  [0x23] = function(b, t)
    b:int(t, "producer_id", 8); b:int(t, "sequence", 8); b:int(t, "status", 1); b:int(t, "timestamp", 8)
    b:each(t, 2, "range", function(r) b:text(r, "topic", 1); b:int(r, "first_offset", 8); b:int(r, "num", 4) end)
  end,
  [0x24] = function(b, t)
    b:int(t, "sub_id", 4); b:int(t, "start", 1); b:int(t, "start_value", 8); b:int(t, "ack_mode", 1)
    b:int(t, "policy", 1); b:int(t, "credit", 4); b:int(t, "ack_wait_ms", 4); b:text(t, "durable", 1)
    b:text(t, "group", 1); b:topics(t, "pattern", 2)
    b:each(t, 2, "offset", function(o) b:text(o, "topic", 1); b:int(o, "offset", 8) end)
    if b.pos < b.stop then  -- client protocol 3: what follows (bit 0 a key filter, bit 1 a tag query)
      local parts = b:int(t, "parts", 1)
      if parts % 2 == 1 then b:key_filter(t) end
      if parts >= 2 then b:text(t, "query", 2) end
    end
  end,
  [0x25] = function(b, t)
    b:int(t, "sub_id", 4)
    b:each(t, 2, "offset", function(o) b:text(o, "topic", 1); b:int(o, "offset", 8) end)
  end,
  [0x26] = function(b, t) b:int(t, "sub_id", 4) end,
  [0x27] = function(b, t) b:int(t, "sub_id", 4); b:int(t, "op", 1); b:topics(t, "pattern", 2) end,
  [0x28] = function(b, t) b:int(t, "sub_id", 4); b:record_batch(t) end,
  [0x32] = function(b, t) b:int(t, "sub_id", 4); b:headers(t); b:record_batch(t) end,
  [0x33] = function(b, t) b:int(t, "sub_id", 4); b:int(t, "key_op", 1); b:key_filter(t) end,
  [0x29] = function(b, t)
    b:int(t, "sub_id", 4)
    b:each(t, 2, "range", function(r)
      b:text(r, "topic", 1); b:int(r, "first_offset", 8); b:int(r, "last_offset", 8)
    end)
  end,
  [0x2A] = function(b, t) b:int(t, "sub_id", 4); b:int(t, "credit", 4) end,
  [0x2B] = function(b, t)
    b:int(t, "sub_id", 4); b:text(t, "topic", 1); b:int(t, "first_offset", 8); b:int(t, "dropped", 8)
  end,
  [0x2C] = function(b, t) b:int(t, "sub_id", 4); b:int(t, "code", 2); b:text(t, "reason", 2) end,
  [0x2D] = function(b, t) b:int(t, "code", 2); b:int(t, "ref", 8); b:text(t, "reason", 2) end,
  [0x2E] = function(_, _) end,
  [0x2F] = function(b, t) b:blob(t, "document", 4) end,
  [0x30] = function(b, t) b:int(t, "sub_id", 4); b:int(t, "ref", 4) end,
  [0x31] = function(b, t)
    b:int(t, "sub_id", 4); b:int(t, "ref", 4)
    b:each(t, 2, "position", function(o) b:text(o, "topic", 1); b:int(o, "offset", 8) end)
  end,
}

-- Mesh v3 (wire/frames/mesh_v3.py): named, the body shown whole.
for opcode = 0x13, 0x1D do
  BODIES[opcode] = function(b, t)
    if b.stop > b.pos then t:add(F.v3_body, b:take(b.stop - b.pos)) end
  end
end

-- One whole frame (dissect_tcp_pdus hands them over one by one, reassembled).
local function dissect_frame(tvb, pinfo, tree)
  local opcode = tvb(0, 1):uint()
  local length = tvb(1, 4):uint()
  local name = OPCODES[opcode] or string.format("UNKNOWN_0x%02x", opcode)
  pinfo.cols.protocol = "pub0sub"
  local info = tostring(pinfo.cols.info)
  if info:sub(1, 8) ~= "pub0sub " then pinfo.cols.info = "pub0sub " .. name else pinfo.cols.info:append(", " .. name) end
  local t = tree:add(p0, tvb(0, HEADER + length), "pub0sub " .. name)
  t:add(F.opcode, tvb(0, 1))
  t:add(F.name, tvb(0, 1), name):set_generated()
  t:add(F.length, tvb(1, 4))
  local read = BODIES[opcode]
  if not read then
    t:add_proto_expert_info(ef_malformed, "unknown opcode")
    return HEADER + length
  end
  local b = body(tvb, HEADER, HEADER + length)
  local ok, err = pcall(read, b, t)
  if ok and b.pos ~= b.stop then ok, err = false, (b.stop - b.pos) .. " bytes left over in the body" end
  if not ok then t:add_proto_expert_info(ef_malformed, tostring(err)) end
  return HEADER + length
end

-- Each whole frame of the segment; a frame split across segments is asked for whole (TCP
-- reassembly). By hand rather than dissect_tcp_pdus, which cannot ask for more data when it
-- runs under a heuristic dissector.
function p0.dissector(tvb, pinfo, tree)
  local offset, total = 0, tvb:len()
  while offset < total do
    if total - offset < HEADER then
      pinfo.desegment_offset, pinfo.desegment_len = offset, DESEGMENT_ONE_MORE_SEGMENT
      return total
    end
    local need = HEADER + tvb(offset + 1, 4):uint()
    if total - offset < need then
      pinfo.desegment_offset, pinfo.desegment_len = offset, need - (total - offset)
      return total
    end
    dissect_frame(tvb(offset, need):tvb(), pinfo, tree)
    offset = offset + need
  end
  return total
end

-- Fixed body sizes: what makes a 5-byte header convincing on an unknown port.
local FIXED = { [0x01] = 4, [0x03] = 1, [0x05] = 1, [0x12] = 16, [0x26] = 4, [0x2A] = 8, [0x2E] = 0 }

local function plausible_header(tvb, offset)
  if tvb:len() < offset + HEADER then return nil end
  local opcode = tvb(offset, 1):uint()
  local length = tvb(offset + 1, 4):uint()
  if not OPCODES[opcode] or length > MAX_BODY then return nil end
  if FIXED[opcode] and FIXED[opcode] ~= length then return nil end
  if opcode == 0x01 and tvb:len() >= offset + 9 then
    local word = tvb(offset + 5, 4):string()
    if word ~= "ping" and word ~= "pong" then return nil end
  end
  if (opcode == 0x20 or opcode == 0x21) and tvb:len() >= offset + 7 then
    local version = tvb(offset + 5, 2):uint()
    if version < 1 or version > 3 then return nil end  -- HELLO and WELCOME start with protocol version 1..3
  end
  return length
end

local function heuristic(tvb, pinfo, tree)
  local length = plausible_header(tvb, 0)
  if not length then return false end
  -- A frame that ends inside this segment must be followed by another plausible header.
  local next_at = HEADER + length
  if tvb:len() > next_at and not plausible_header(tvb, next_at) and tvb:len() >= next_at + HEADER then
    return false
  end
  -- A body that cannot be whole must at least be one the peer could send in one go.
  if tvb:len() < next_at and length > 16 * 1024 * 1024 then return false end
  pinfo.conversation = p0
  p0.dissector(tvb, pinfo, tree)
  return true
end

p0:register_heuristic("tcp", heuristic)
DissectorTable.get("tcp.port"):add(7420, p0)
