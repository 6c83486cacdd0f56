"""The Lua scripts behind shared state: each call is one script, so each update is atomic.

Every key is under one hash tag (`{prefix}`), so a script touches one Cluster slot. Times are
wall-clock milliseconds. Every script prunes what expired and distrusts what is too late: a
deadline beyond `limit` (now + max_seconds + skew: a tampered score, a host with a wrong
clock, +inf) is cut to `truncate` (now + max_seconds) in place, the first time any process
sees it. ARGV[1..3] is always now, limit, truncate.
"""

from __future__ import annotations

__all__ = [
    "CLEAR",
    "END",
    "KEY_NAMES",
    "LOOKUP",
    "RECORD",
    "RELEASE",
    "SECRET_CHECK",
    "SECRET_CHECK_KEY",
    "START",
]

SECRET_CHECK_KEY = "secret-check"
"""`{prefix}:secret-check`: an HMAC of a fixed label under the fleet's secret (SPEC §20)."""

SECRET_CHECK = """
-- The first writer's check value wins; every process compares its own with it.
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
"""

KEY_NAMES = (
    "deadlines",  # zset: id -> cooldown deadline
    "overflow",  # string: the capacity guard's deadline
    "inflight",  # hash: entry -> attempts in flight (SPEC §15)
    "leases",  # zset: "<token>:<entry>" -> lease deadline
    "probes",  # hash: entry -> the lease of its probe
    "released",  # zset: id -> the deadline of its last cooldown (a probe is due after it)
    "budgets",  # hash: entry -> requests remaining
    "resets",  # zset: entry -> when its budget ends
    "dispatched",  # zset: entry -> its last dispatch
    "throttled",  # zset: entry -> when its last cooldown was recorded
    "learned",  # hash: entry -> its learned window, as numbers (SPEC §12)
    "learned-used",  # zset: entry -> when its learned window was last written
)
"""Each script's KEYS, in this order, as `{prefix}:<name>`."""

_MARKS = 10000  # the most members each marking set keeps (they only order or mark keys)
_LONGEST_LEASE_MS = (3600 + 10) * 1000  # MODEL_COOLDOWN_LEASE_SECONDS' maximum, plus skew
_MOST_IN_FLIGHT = 10000  # attempts one entry can have in flight: the leases kept at most

_COMMON = f"""
local now, limit, truncate = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local function trusted(key, member)
  local score = redis.call('ZSCORE', key, member)
  if not score then return nil end
  score = tonumber(score)
  if score > limit then
    redis.call('ZADD', key, truncate, member)
    return tonumber(truncate)
  end
  return score
end
local function mark(key, member, score, companion)
  redis.call('ZADD', key, score, member)
  local extra = redis.call('ZCARD', key) - {_MARKS}
  if extra <= 0 then return end
  if companion then
    for _, dropped in ipairs(redis.call('ZRANGE', key, 0, extra - 1)) do
      redis.call('HDEL', companion, dropped)
    end
  end
  redis.call('ZREMRANGEBYRANK', key, 0, extra - 1)
end
local function overflow_until()
  local overflow = redis.call('GET', KEYS[2])
  local value = overflow and tonumber(overflow)
  if overflow and (value == nil or value ~= value) then return overflow end
  if value and value > limit then
    redis.call('SET', KEYS[2], ARGV[3])
    return ARGV[3]
  end
  if value and value > now then return overflow end
  return false
end
"""

_PRUNE_DEADLINES = "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])\n"

_PRUNE = f"""
local function in_flight(entry)
  -- A count that no sequence of attempts can reach (negative, fractional, inf, nan, or more
  -- than the leases kept) is distrusted: dropped, and read as none.
  local count = tonumber(redis.call('HGET', KEYS[3], entry))
  if count and count >= 0 and count <= {_MOST_IN_FLIGHT} and count % 1 == 0 then return count end
  if count then redis.call('HDEL', KEYS[3], entry) end
  return 0
end
local function leave(member)
  local entry = string.match(member, ':(.*)$') or ''
  local count = in_flight(entry) - 1
  if count > 0 then redis.call('HSET', KEYS[3], entry, count)
  else redis.call('HDEL', KEYS[3], entry) end
  if redis.call('HGET', KEYS[5], entry) == member then redis.call('HDEL', KEYS[5], entry) end
  redis.call('ZREM', KEYS[4], member)
end
local longest = now + {_LONGEST_LEASE_MS}
local late = redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. longest, '+inf', 'LIMIT', 0, 64)
for _, member in ipairs(late) do redis.call('ZADD', KEYS[4], longest, member) end
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', ARGV[1], 'LIMIT', 0, 64)) do
  leave(member)
end
for _, entry in ipairs(redis.call('ZRANGEBYSCORE', KEYS[8], '-inf', ARGV[1], 'LIMIT', 0, 64)) do
  redis.call('HDEL', KEYS[7], entry)
  redis.call('ZREM', KEYS[8], entry)
end
"""

# ARGV[4..6]: entry, deadline, cap. Keeps the later deadline, never evicts: at the cap it
# raises the overflow instead. It first cuts up to 64 members scored beyond the limit: they
# expire with the maximum, so they cannot hold the capacity guard up for ever. It marks when
# the cooldown was recorded (a success sent before it proves nothing) and when it ends (the
# first dispatch after that is a probe).
_RECORD_FUNCTION = """
local function record(entry, deadline_text, cap)
  local late = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[2], '+inf', 'LIMIT', 0, 64)
  for _, member in ipairs(late) do redis.call('ZADD', KEYS[1], truncate, member) end
  local deadline = tonumber(deadline_text)
  local current = trusted(KEYS[1], entry)
  if not current and redis.call('ZCARD', KEYS[1]) >= tonumber(cap) then
    local overflow = tonumber(redis.call('GET', KEYS[2]) or '0')
    if overflow == nil or overflow ~= overflow or overflow > limit then overflow = 0 end
    if deadline > overflow then redis.call('SET', KEYS[2], deadline_text) end
    return 0
  end
  if not current or deadline > current then redis.call('ZADD', KEYS[1], deadline, entry) end
  mark(KEYS[10], entry, now)
  local released = trusted(KEYS[6], entry)
  if not released or deadline > released then mark(KEYS[6], entry, deadline) end
  return 1
end
local function clear(entry, sent)
  local throttled = redis.call('ZSCORE', KEYS[10], entry)
  if throttled and tonumber(throttled) > tonumber(sent) then return 0 end
  local removed = redis.call('ZREM', KEYS[1], entry)
  if removed == 1 then redis.call('ZREM', KEYS[6], entry) end
  return removed
end
"""

RECORD = _COMMON + _PRUNE_DEADLINES + _RECORD_FUNCTION + "return record(ARGV[4], ARGV[5], ARGV[6])"

# ARGV[4..5]: entry, when the attempt that succeeded started. Clears only its own entry, and
# only when the cooldown was recorded before that attempt started.
CLEAR = _COMMON + _PRUNE_DEADLINES + _RECORD_FUNCTION + "return clear(ARGV[4], ARGV[5])"

# ARGV[4..]: ids. Each id's deadline (or false), then the live overflow deadline (or false);
# an overflow that is not a number is returned as it is, for the client to refuse.
LOOKUP = (
    _COMMON
    + _PRUNE_DEADLINES
    + """
local result = {}
for index = 4, #ARGV do result[index - 3] = trusted(KEYS[1], ARGV[index]) or false end
result[#ARGV - 2] = overflow_until()
return result
"""
)

# ARGV[4..6]: the lease deadline, this attempt's token, '1' for spread order; then pairs of
# (credential id, entry id), the candidates in the caller's order. Admits the first free one
# (or, spread, the least loaded: fewest in flight, budgeted, soonest reset, least recently
# dispatched; ties keep the caller's order) and counts it in flight, atomically for every
# process. Returns {chosen position, 1 if it is the probe, false, its learned window or false},
# or, when none is admitted, {0, 0, overflow or false, then each candidate's hold: 0 if free,
# else until when (ms)}.
START = (
    _COMMON
    + _PRUNE_DEADLINES
    + _PRUNE
    + """
local function lighter(a, b)
  for i = 1, 4 do if a[i] ~= b[i] then return a[i] < b[i] end end
  return false
end
local spread = ARGV[6] == '1'
local holds, best, best_load, best_count = {}, nil, nil, 0
for i = 7, #ARGV, 2 do
  local position, entry = (i - 5) / 2, ARGV[i + 1]
  local hold = math.max(trusted(KEYS[1], ARGV[i]) or 0, trusted(KEYS[1], entry) or 0)
  if hold <= now then
    hold = 0
    local probe = redis.call('HGET', KEYS[5], entry)
    if probe and redis.call('ZSCORE', KEYS[4], probe) then hold = now + 1000
    elseif probe then redis.call('HDEL', KEYS[5], entry) end
  end
  local count, reset = 0, nil
  if hold == 0 then
    count = in_flight(entry)
    reset = trusted(KEYS[8], entry)
    local remaining = tonumber(redis.call('HGET', KEYS[7], entry))
    if not (reset and remaining and reset > now) then reset = nil
    elseif remaining - count <= 0 then hold = reset end
  end
  holds[position] = hold
  if hold == 0 then
    local load = {count, reset and 0 or 1, reset or math.huge,
                  tonumber(redis.call('ZSCORE', KEYS[9], entry)) or -math.huge}
    if not best or lighter(load, best_load) then
      best, best_load, best_count = position, load, count
    end
    if not spread then break end
  end
end
local overflow = overflow_until()
if not best or overflow then
  local result = {0, 0, overflow}
  for position, hold in ipairs(holds) do result[position + 3] = hold end
  return result
end
local credential, entry = ARGV[5 + 2 * best], ARGV[6 + 2 * best]
local member = ARGV[5] .. ':' .. entry
redis.call('ZADD', KEYS[4], ARGV[4], member)
redis.call('HSET', KEYS[3], entry, best_count + 1)
mark(KEYS[9], entry, now)
local probe = 0
for _, id in ipairs({entry, credential}) do
  local released = trusted(KEYS[6], id)
  if released and released <= now then probe = 1 end
end
if probe == 1 then redis.call('HSET', KEYS[5], entry, member) end
return {best, probe, false, redis.call('HGET', KEYS[11], entry)}
"""
)

# ARGV[4..]: cap, the attempt's lease member, entry, credential id, '1' if it was served;
# then what its answer wrote: 'record' (id, deadline), 'clear' (id, when the attempt
# started) or '' (nothing); then the budget its headers announced: remaining, reset, or '';
# then the learned window after the answer, or ''.
# Writes the answer first, so no other process can take the key between the two.
END = (
    _COMMON
    + _PRUNE_DEADLINES
    + _PRUNE
    + _RECORD_FUNCTION
    + """
local cap, member, entry, credential = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
if ARGV[9] == 'record' then record(ARGV[10], ARGV[11], cap)
elseif ARGV[9] == 'clear' then clear(ARGV[10], ARGV[11]) end
if ARGV[12] ~= '' then
  redis.call('HSET', KEYS[7], entry, ARGV[12])
  mark(KEYS[8], entry, ARGV[13], KEYS[7])
end
if ARGV[14] ~= '' then
  redis.call('HSET', KEYS[11], entry, ARGV[14])
  mark(KEYS[12], entry, now, KEYS[11])
end
if redis.call('ZSCORE', KEYS[4], member) then
  local probe = redis.call('HGET', KEYS[5], entry) == member
  leave(member)
  if probe and ARGV[8] == '1' then redis.call('ZREM', KEYS[6], entry, credential) end
end
return 1
"""
)

# ARGV[4..]: leases whose end did not reach Redis (it was down): release each one still held,
# so a probe claimed before an outage does not hold its key until the lease runs out.
RELEASE = (
    _COMMON
    + _PRUNE_DEADLINES
    + _PRUNE
    + """
for index = 4, #ARGV do
  if redis.call('ZSCORE', KEYS[4], ARGV[index]) then leave(ARGV[index]) end
end
return 1
"""
)
