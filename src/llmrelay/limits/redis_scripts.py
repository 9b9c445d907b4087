"""The Lua scripts of the Redis limiter (redis.py): each runs atomically in Redis, so an
admission checks and takes every limit of every scope in one step."""

from llmrelay.limits.base import LEASE_TTL_S, TPM_BUCKETS, WINDOW_S

# A scope's tpm hash holds its one-second buckets (field: the second, value: tokens) and,
# so that an admission need not sum them, two more fields: TOTAL, the sum of the buckets
# present, and LOW, the oldest second present. Both are negative numbers, never a second,
# and so a script of an earlier version (which summed every field and dropped those below
# the window) drops them rather than failing; a hash without them is recounted (RECOUNT).
# Every script that changes a bucket changes TOTAL by as much.
_TPM_FIELDS = """
local TOTAL, LOW = '-1', '-2'
"""

# Drops the buckets of `key` below second `oldest` and returns the tokens of those left
# and the oldest of them (nil: none), stored as TOTAL and LOW. Run when LOW leaves the
# window (at most about once a second per scope) or TOTAL or LOW is missing.
_RECOUNT = """
local function recount(key, oldest)
  local fields = redis.call('HGETALL', key)
  if #fields == 0 then return 0, nil end
  local used, low, low_s, gone = 0, nil, nil, {}
  for j = 1, #fields, 2 do
    local name = fields[j]
    if name ~= TOTAL and name ~= LOW then
      local s = tonumber(name)
      if s < oldest then
        gone[#gone + 1] = name
      else
        used = used + tonumber(fields[j + 1])
        if low == nil or s < low_s then low, low_s = name, s end
      end
    end
  end
  if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
  if low then
    redis.call('HSET', key, TOTAL, string.format('%d', used), LOW, low)
  else
    redis.call('HDEL', key, TOTAL, LOW)
  end
  return used, low
end
"""

# A scope's budget holds (the most each request in flight may cost, held from the budget
# until it settles): HOLDS, a sorted set of lease ids by expiry (renewed with the leases, so
# a dead replica's holds lapse), and HELD, a hash of lease id -> micro-USD with their sum in
# field HELD_SUM. An admission first drops the lapsed holds.
_HOLDS = """
local HELD_SUM = '-1'
local function held_now(holds, held, now)
  local gone = redis.call('ZRANGEBYSCORE', holds, '-inf', now)
  if #gone > 0 then
    local amounts = redis.call('HMGET', held, unpack(gone))
    local sum = 0
    for j = 1, #amounts do sum = sum + (tonumber(amounts[j]) or 0) end
    redis.call('HDEL', held, unpack(gone))
    redis.call('ZREMRANGEBYSCORE', holds, '-inf', now)
    if sum ~= 0 then redis.call('HINCRBY', held, HELD_SUM, -sum) end
  end
  return tonumber(redis.call('HGET', held, HELD_SUM) or '0')
end
"""

# KEYS: per scope rpm, tpm, leases, spend, holds, held. ARGV: now (the 8 bytes of a
# little-endian double: packing it costs the caller a fraction of formatting it), tokens,
# lease id, rpm member, budget hold, then the ttls (rpm, tpm, leases, spend), then per scope
# its rpm, tpm, concurrency, budget ('' = none). Times are computed
# here with the same double arithmetic as local.py and written as 17 significant digits, which
# Redis reads back as the same double. Refusal: {0, scope index, kind 1..4, figure, figure};
# admission: {1, _FIGURES figures per scope}. Figures that are doubles (times) or may exceed a
# Lua number's exact range (spend) come back as the strings Redis gave.
ADMIT = (
    _TPM_FIELDS
    + _RECOUNT
    + _HOLDS
    + f"""
local now_n = struct.unpack('<d', ARGV[1])
local second_n = math.floor(now_n)
local now = string.format('%.17g', now_n)
local rpm_cutoff = string.format('%.17g', now_n - {WINDOW_S})
local tpm_oldest, second = second_n - {TPM_BUCKETS} + 1, string.format('%d', second_n)
local expiry = string.format('%.17g', now_n + {LEASE_TTL_S!r})
local tokens, lease, member, hold = tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5])
local rpm_ttl, tpm_ttl, leases_ttl, spend_ttl = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
"""
    + """
local n = #KEYS / 6
local figures = {}
for i = 1, n do
  local k, a = (i - 1) * 6, 9 + (i - 1) * 4
  local rpm, tpm = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local conc, budget = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local f = {0, '', 0, '', 0, '0'}
  if rpm then
    redis.call('ZREMRANGEBYSCORE', KEYS[k + 1], '-inf', rpm_cutoff)
    f[1] = redis.call('ZCARD', KEYS[k + 1])
    f[2] = redis.call('ZRANGE', KEYS[k + 1], 0, 0, 'WITHSCORES')[2] or ''
    if f[1] >= rpm then return {0, i, 1, f[1], f[2]} end
  end
  if tpm then
    local kept = redis.call('HMGET', KEYS[k + 2], TOTAL, LOW)
    local used, low = tonumber(kept[1]), kept[2]
    if not used or not low or tonumber(low) < tpm_oldest then
      used, low = recount(KEYS[k + 2], tpm_oldest)
    end
    f[3], f[4] = used, low or ''
    if f[3] + math.min(tokens, tpm) > tpm then return {0, i, 2, f[3], f[4]} end
  end
  if conc then
    redis.call('ZREMRANGEBYSCORE', KEYS[k + 3], '-inf', now)
    f[5] = redis.call('ZCARD', KEYS[k + 3])
    if f[5] >= conc then return {0, i, 3, conc, ''} end  -- local says none left
  end
  if budget then
    local spent = tonumber(redis.call('GET', KEYS[k + 4]) or '0')
    f[6] = spent + held_now(KEYS[k + 5], KEYS[k + 6], now)
    if f[6] >= budget then return {0, i, 4, 0, string.format('%d', f[6])} end
  end
  figures[i] = {rpm, tpm, conc, f, budget}
end
local out = {1}
for i = 1, n do
  local k, rpm, tpm, conc, f = (i - 1) * 6, unpack(figures[i], 1, 4)
  local budget = figures[i][5]
  if rpm then
    redis.call('ZADD', KEYS[k + 1], now, member)
    redis.call('PEXPIRE', KEYS[k + 1], rpm_ttl)
    f[1] = f[1] + 1
    if f[2] == '' then f[2] = now end
  end
  if tpm then
    local reserve = math.min(tokens, tpm)
    redis.call('HINCRBY', KEYS[k + 2], second, reserve)
    redis.call('HINCRBY', KEYS[k + 2], TOTAL, reserve)
    f[3] = f[3] + reserve
    if f[4] == '' or tonumber(second) < tonumber(f[4]) then
      f[4] = second
      redis.call('HSET', KEYS[k + 2], LOW, second)
    end
    redis.call('PEXPIRE', KEYS[k + 2], tpm_ttl)
  end
  if conc then
    redis.call('ZADD', KEYS[k + 3], expiry, lease)
    redis.call('PEXPIRE', KEYS[k + 3], leases_ttl)
    f[5] = redis.call('ZCARD', KEYS[k + 3])
  end
  if budget and hold > 0 then
    redis.call('ZADD', KEYS[k + 5], expiry, lease)
    redis.call('HSET', KEYS[k + 6], lease, hold)
    redis.call('HINCRBY', KEYS[k + 6], HELD_SUM, hold)
    redis.call('EXPIRE', KEYS[k + 5], spend_ttl)
    redis.call('EXPIRE', KEYS[k + 6], spend_ttl)
    f[6] = f[6] + hold
  end
  if type(f[6]) == 'number' then f[6] = string.format('%d', f[6]) end
  for j = 1, 6 do out[#out + 1] = f[j] end
end
return out
"""
)

# KEYS: per settle, per scope: leases, tpm, spend, holds, held. ARGV: spend ttl, number of
# settles, then per settle: lease id, bucket, number of scopes, then per scope: tpm delta,
# cost, whether it held ('' = none). A bucket that left the window is not recreated
# (HEXISTS first); a hold that lapsed meanwhile was already dropped (its amount is read here).
SETTLE = (
    _TPM_FIELDS
    + """
local HELD_SUM = '-1'
"""
    + """
local ttl, a, k = ARGV[1], 3, 0
for _ = 1, tonumber(ARGV[2]) do
  local lease, bucket, n = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  a = a + 3
  for _ = 1, n do
    redis.call('ZREM', KEYS[k + 1], lease)
    if ARGV[a] ~= '' and redis.call('HEXISTS', KEYS[k + 2], bucket) == 1 then
      redis.call('HINCRBY', KEYS[k + 2], bucket, ARGV[a])
      redis.call('HINCRBY', KEYS[k + 2], TOTAL, ARGV[a])
    end
    if ARGV[a + 1] ~= '' then
      redis.call('INCRBY', KEYS[k + 3], ARGV[a + 1])
      redis.call('EXPIRE', KEYS[k + 3], ttl)
    end
    if ARGV[a + 2] ~= '' then
      redis.call('ZREM', KEYS[k + 4], lease)
      local amount = redis.call('HGET', KEYS[k + 5], lease)
      if amount then
        redis.call('HDEL', KEYS[k + 5], lease)
        redis.call('HINCRBY', KEYS[k + 5], HELD_SUM, -tonumber(amount))
      end
    end
    a, k = a + 3, k + 5
  end
end
return 0
"""
)
