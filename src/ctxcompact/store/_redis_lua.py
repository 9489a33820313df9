"""The Lua scripts of :class:`~ctxcompact.store.RedisStore`: each read or write is one script,
so it runs atomically in Redis (no other client's command runs in between) and costs one round
trip, however many records it touches.

Layout, under a key prefix ``P`` written as a hash tag (``{P}``, so every key of one store is in
one hash slot):

* ``{P}:clock``: the last stamp given (microseconds of the Redis server's clock, never going
  back: one clock for every replica, whatever their own clocks say);
* ``{P}:bytes``: the bytes of JSON kept (the bound is checked against it);
* ``{P}:lru``: a sorted set, entry id -> its stamp (the order of eviction, oldest first);
* ``{P}:size``: a hash, entry id -> its size in bytes;
* ``{P}:data``: a hash, entry id -> its content (a message's JSON, or a summary's JSON array);
* ``{P}:id:<ID>``: one hash per namespace and tool-call id (``<ID>`` hashes both), field
  ``<position>:<content hash>`` -> the record's metadata as JSON.

An original's entry id is ``o:<ID>:<position>:<content hash>``, so its metadata is found from
the id alone; a summary's is ``s:<hash of namespace and key>``.
"""

from __future__ import annotations

__all__ = ["FIND_SUMMARY", "GET", "PUT"]

# Shared by the scripts: the clock (now, in microseconds) and dropping one entry.
_COMMON = """
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function fmt(n) return string.format('%.0f', n) end
local function drop(lru, sizes, data, idprefix, eid)
  local size = tonumber(redis.call('HGET', sizes, eid) or '0')
  redis.call('HDEL', data, eid)
  redis.call('HDEL', sizes, eid)
  redis.call('ZREM', lru, eid)
  local idhash, field = string.match(eid, '^o:([^:]+):(.+)$')
  if idhash then
    redis.call('HDEL', idprefix .. idhash, field)
  end
  return size
end
"""

PUT = (
    _COMMON
    + """
-- KEYS: clock, bytes, lru, size, data
-- ARGV: max_bytes, ttl (microseconds, 0 = none), id-key prefix, then per entry five values:
--   entry id, metadata ('' for a summary), size, content, replace ('1': a summary, whose
--   content replaces the old; '0': an original, kept as it was and only made recent)
-- Returns {entries evicted by the bound, bytes they freed, entries expired}.
local clock, bytes, lru, sizes, data = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local max_bytes, ttl, idprefix = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local now = now_us()
local stamp = math.max(now, tonumber(redis.call('GET', clock) or '0'))
local total = tonumber(redis.call('GET', bytes) or '0')
local expired = 0
if ttl > 0 then
  -- At most 1,000 a write, so no one script holds Redis for long; the rest go with the
  -- next writes (reads never return them meanwhile, and eviction takes the oldest first).
  local old = redis.call('ZRANGEBYSCORE', lru, '-inf', '(' .. fmt(now - ttl), 'LIMIT', 0, 1000)
  for _, eid in ipairs(old) do
    total = total - drop(lru, sizes, data, idprefix, eid)
    expired = expired + 1
  end
end
for i = 4, #ARGV, 5 do
  local eid, meta, size, content, replace =
    ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3], ARGV[i + 4]
  stamp = stamp + 1
  local old = redis.call('HGET', sizes, eid)
  if not old or replace == '1' then
    if old then total = total - tonumber(old) end
    redis.call('HSET', data, eid, content)
    redis.call('HSET', sizes, eid, size)
    total = total + size
  end
  if meta ~= '' then
    -- A record stored again keeps its first metadata (as SQLiteStore does); its id's key
    -- lives as long as its newest record.
    local idhash, field = string.match(eid, '^o:([^:]+):(.+)$')
    local idkey = idprefix .. idhash
    redis.call('HSETNX', idkey, field, meta)
    if ttl > 0 then redis.call('PEXPIRE', idkey, math.ceil(ttl / 1000)) end
  end
  redis.call('ZADD', lru, fmt(stamp), eid)
end
local evicted, freed = 0, 0
while total > max_bytes do
  local oldest = redis.call('ZRANGE', lru, 0, 0)
  if #oldest == 0 then break end
  local size = drop(lru, sizes, data, idprefix, oldest[1])
  total = total - size
  freed = freed + size
  evicted = evicted + 1
end
if total < 0 then total = 0 end
redis.call('SET', clock, fmt(stamp))
redis.call('SET', bytes, fmt(total))
if ttl > 0 then
  for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, math.ceil(ttl / 1000)) end
end
return {evicted, freed, expired}
"""
)

GET = (
    _COMMON
    + """
-- KEYS: lru, data, the id's key
-- ARGV: the id's hash, position ('' for none), ttl (microseconds, 0 = none)
-- Returns {metadata, content} of the record at the position, else of the most recently
-- stored one; nil when there is none.
local lru, data, idkey = KEYS[1], KEYS[2], KEYS[3]
local idhash, position, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local cutoff = -1
if ttl > 0 then cutoff = now_us() - ttl end
local fields = redis.call('HGETALL', idkey)
local best, best_meta, best_exact, best_stamp = nil, nil, -1, -1
for j = 1, #fields, 2 do
  local field, meta = fields[j], fields[j + 1]
  local eid = 'o:' .. idhash .. ':' .. field
  local score = redis.call('ZSCORE', lru, eid)
  if score and tonumber(score) >= cutoff then
    local stamp = tonumber(score)
    local exact = 0
    if position ~= '' and string.match(field, '^(-?%d+):') == position then exact = 1 end
    if exact > best_exact or (exact == best_exact and stamp > best_stamp) then
      best, best_meta, best_exact, best_stamp = eid, meta, exact, stamp
    end
  end
end
if not best then return nil end
local content = redis.call('HGET', data, best)
if not content then return nil end
return {best_meta, content}
"""
)

FIND_SUMMARY = (
    _COMMON
    + """
-- KEYS: lru, data
-- ARGV: ttl (microseconds, 0 = none), then entry ids in order of preference
-- Returns {index (1-based) of the first id kept, its content}; nil when none is.
local lru, data, ttl = KEYS[1], KEYS[2], tonumber(ARGV[1])
local cutoff = -1
if ttl > 0 then cutoff = now_us() - ttl end
for i = 2, #ARGV do
  local score = redis.call('ZSCORE', lru, ARGV[i])
  if score and tonumber(score) >= cutoff then
    local content = redis.call('HGET', data, ARGV[i])
    if content then return {i - 1, content} end
  end
end
return nil
"""
)
