"""The Lua scripts behind shared state: each call is one script, so each update is atomic.

Every key is under one hash tag (`{prefix}`), so a script touches one Cluster slot. Times are
wall-clock milliseconds. Every script prunes what expired and distrusts what is too late: a
deadline beyond `limit` (now + max_seconds + skew: a tampered score, a host with a wrong
clock, +inf) is cut to `truncate` (now + max_seconds) in place, the first time any process
sees it. ARGV[1..3] is always now, limit, truncate.
"""

from __future__ import annotations

from .budget_scripts import KEEP_BUDGETS, READ_BUDGETS
from .declared_scripts import DECLARED
from .foreign_scripts import KEEP_FOREIGN

__all__ = [
    "CLEAR",
    "END",
    "FORGET_CREDENTIAL",
    "KEY_NAMES",
    "LOOKUP",
    "RECORD",
    "RECORD_FOREIGN",
    "RELEASE",
    "SECRET_CHECK",
    "SECRET_CHECK_KEY",
    "START",
]

SECRET_CHECK_KEY = "secret-check"
"""`{prefix}:secret-check`: an HMAC of a fixed label under the fleet's secret."""

SECRET_CHECK = """
-- The first writer's check value wins; every process compares its own with it.
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
"""

KEY_NAMES = (
    "deadlines",  # zset: id -> cooldown deadline
    "overflow",  # string: the capacity guard's deadline
    "inflight",  # hash: entry -> attempts in flight
    "leases",  # zset: "<token>:<entry>" -> lease deadline
    "probes",  # hash: entry -> the lease of its probe
    "released",  # zset: id -> the deadline of its last cooldown (a probe is due after it)
    "budgets",  # hash: owner -> requests remaining; "t" + owner -> tokens remaining
    "resets",  # zset: each budget above -> when it ends
    "dispatched",  # zset: entry -> its last dispatch
    "throttled",  # zset: entry -> when its last cooldown was recorded
    "learned",  # hash: entry -> its learned window, as numbers
    "learned-used",  # zset: entry -> when its learned window was last written
    "refills",  # hash: each budget above -> "limit,announced,largest"
    "costs",  # hash: owner -> tokens in flight
    "cleared",  # hash: id an operator cleared -> when (wall ms), for the processes' own state
    "foreign",  # zset: entry of a key its pool does not hold -> when first recorded (wall ms)
)
"""Each script's KEYS, in this order, as `{prefix}:<name>`."""

_MARKS = 10000  # the most members each marking set keeps (they only order or mark keys)
_LONGEST_LEASE_MS = (3600 + 10) * 1000  # MODEL_COOLDOWN_LEASE_SECONDS' maximum, plus skew
_MOST_IN_FLIGHT = 10000  # attempts one entry can have in flight: the leases kept at most
_MOST_COST_IN_FLIGHT = _MOST_IN_FLIGHT * 10**9  # tokens: that many attempts at the largest cost

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
local function mark(key, member, score, companion, other)
  redis.call('ZADD', key, score, member)
  local extra = redis.call('ZCARD', key) - {_MARKS}
  if extra <= 0 then return end
  if companion then
    for _, dropped in ipairs(redis.call('ZRANGE', key, 0, extra - 1)) do
      redis.call('HDEL', companion, dropped)
      if other then redis.call('HDEL', other, dropped) end
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
local function counted(key, id, most)
  -- A count that no sequence of attempts can reach (negative, fractional, inf, nan, or more
  -- than the leases kept) is distrusted: dropped, and read as none.
  local count = tonumber(redis.call('HGET', key, id))
  if count and count >= 0 and count <= most and count % 1 == 0 then return count end
  if count then redis.call('HDEL', key, id) end
  return 0
end
local function in_flight(entry) return counted(KEYS[3], entry, {_MOST_IN_FLIGHT}) end
local function cost_in_flight(owner) return counted(KEYS[14], owner, {_MOST_COST_IN_FLIGHT}) end
local function take(key, id, count, amount)
  if count - amount > 0 then redis.call('HSET', key, id, count - amount)
  else redis.call('HDEL', key, id) end
end
local function leave(member)
  -- "<lease>:<entry>", then ":<owner>:<cost>" when the budget is an account's or a cost is
  -- held: what the attempt counted in flight, to take back.
  local entry, owner, cost = string.match(member, '^[^:]*:([^:]*):?([^:]*):?([^:]*)$')
  entry = entry or ''
  take(KEYS[3], entry, in_flight(entry), 1)
  if owner and owner ~= '' and owner ~= entry then take(KEYS[3], owner, in_flight(owner), 1) end
  cost = tonumber(cost)
  if cost and cost > 0 then
    if not owner or owner == '' then owner = entry end
    take(KEYS[14], owner, cost_in_flight(owner), cost)
  end
  if redis.call('HGET', KEYS[5], entry) == member then redis.call('HDEL', KEYS[5], entry) end
  redis.call('ZREM', KEYS[4], member)
end
local longest = now + {_LONGEST_LEASE_MS}
local late = redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. longest, '+inf', 'LIMIT', 0, 64)
for _, member in ipairs(late) do redis.call('ZADD', KEYS[4], longest, member) end
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', ARGV[1], 'LIMIT', 0, 64)) do
  leave(member)
end
for _, budget in ipairs(redis.call('ZRANGEBYSCORE', KEYS[8], '-inf', ARGV[1], 'LIMIT', 0, 64)) do
  redis.call('HDEL', KEYS[7], budget)
  redis.call('HDEL', KEYS[13], budget)
  redis.call('ZREM', KEYS[8], budget)
end
"""

# ARGV[4..6]: entry, deadline, cap. Keeps the later deadline, never evicts a held key's entry:
# at the cap a foreign entry (of a key its pool does not hold) gives way, else it raises the
# overflow. It first cuts up to 64 members scored beyond the limit: they
# expire with the maximum, so they cannot hold the capacity guard up for ever. It marks when
# the cooldown was recorded (a success sent before it proves nothing) and when it ends (the
# first dispatch after that is a probe).
_RECORD_FUNCTION = """
local function record(entry, deadline_text, cap)
  local late = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[2], '+inf', 'LIMIT', 0, 64)
  for _, member in ipairs(late) do redis.call('ZADD', KEYS[1], truncate, member) end
  local deadline = tonumber(deadline_text)
  local current = trusted(KEYS[1], entry)
  while not current and redis.call('ZCARD', KEYS[1]) >= tonumber(cap) do
    local foreign = redis.call('ZPOPMIN', KEYS[16])
    if not foreign[1] then break end
    redis.call('ZREM', KEYS[1], foreign[1])
    redis.call('ZREM', KEYS[6], foreign[1])
  end
  redis.call('ZREM', KEYS[16], entry)  -- a held key's entry is not foreign (any more)
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

# ARGV[4..7]: entry, deadline, cap, the most foreign entries per provider; KEYS[17]: the
# provider's foreign entries (`foreign_scripts.py`).
RECORD_FOREIGN = _COMMON + _PRUNE_DEADLINES + _RECORD_FUNCTION + KEEP_FOREIGN

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

# ARGV[4..8]: the lease deadline, this attempt's token, '1' for spread order, its cost in
# tokens ('' unknown), the windows declared for the provider ('' none: see DECLARED); then
# triples (credential id, entry id, owner id: the entry's or its account's budget), the
# candidates in the caller's order. Admits the first free one (or,
# spread, the largest share of its announced budgets left, each less what is in flight, a
# key with none counting as full; then fewest in flight, then least recently dispatched;
# ties keep the caller's order; a cost larger than every candidate's token limit is held by
# no token budget and goes to the largest limit) and
# counts it in flight, with its account's count and its cost, atomically for every
# process. Returns {chosen position, 1 if it is the probe, false, its learned window or
# false, 1 or 2 when only the refill of its request or token budget had room for it, else
# 0}, or, when none is admitted, {0, how many are held by a declared window, overflow or
# false, then each candidate's hold: 0 if free, else until when (ms)}.
START = (
    _COMMON
    + _PRUNE_DEADLINES
    + _PRUNE
    + READ_BUDGETS
    + DECLARED
    + """
local function lighter(a, b)
  for i = 1, 3 do if a[i] ~= b[i] then return a[i] < b[i] end end
  return false
end
local spread, cost = ARGV[6] == '1', tonumber(ARGV[7])
local windows = declared_windows(ARGV[8])
local oversize = cost ~= nil
for i = 9, #ARGV, 3 do
  if oversize then
    local tokens, _, _, largest = budget('t' .. ARGV[i + 2])
    if not tokens or cost <= largest then oversize = false end
  end
end
local holds, best, best_load, best_count, best_refilled, limited = {}, nil, nil, 0, 0, 0
for i = 9, #ARGV, 3 do
  local position, entry, owner = (i - 6) / 3, ARGV[i + 1], ARGV[i + 2]
  local hold = math.max(trusted(KEYS[1], ARGV[i]) or 0, trusted(KEYS[1], entry) or 0)
  if hold <= now then
    hold = 0
    local probe = redis.call('HGET', KEYS[5], entry)
    if probe and redis.call('ZSCORE', KEYS[4], probe) then hold = now + 1000
    elseif probe then redis.call('HDEL', KEYS[5], entry) end
  end
  local count, rank, refilled = 0, -1, 0
  if hold == 0 then
    count = in_flight(entry)
    local spending = owner == entry and count or in_flight(owner)
    local level, _, when, largest_requests, announced = budget(owner)
    local tokens, _, tokens_when, largest, tokens_announced = budget('t' .. owner)
    if level then
      if level - spending < 1 then hold = when(1 + spending)
      elseif announced and announced - spending < 1 then refilled = 1 end
      if not (tokens and oversize) then
        rank = -math.max(0, level - spending) / math.max(1, largest_requests)
      end
    end
    if tokens and oversize then rank = -largest
    elseif tokens then
      local held = cost_in_flight(owner)
      rank = math.max(rank, -math.max(0, tokens - held) / math.max(1, largest))
      if tokens - held < (cost or 1) then hold = math.max(hold, tokens_when((cost or 1) + held))
      elseif refilled == 0 and tokens_announced and tokens_announced - held < (cost or 1) then
        refilled = 2
      end
    end
  end
  if hold == 0 and #windows > 0 then
    hold = declared_hold(windows, owner)
    if hold > 0 then limited = limited + 1 end
  end
  holds[position] = hold
  if hold == 0 then
    local load = {rank, count, tonumber(redis.call('ZSCORE', KEYS[9], entry)) or -math.huge}
    if not best or lighter(load, best_load) then
      best, best_load, best_count, best_refilled = position, load, count, refilled
    end
    if not spread then break end
  end
end
local overflow = overflow_until()
if not best or overflow then
  local result = {0, limited, overflow}
  for position, hold in ipairs(holds) do result[position + 3] = hold end
  return result
end
local credential, entry, owner = ARGV[6 + 3 * best], ARGV[7 + 3 * best], ARGV[8 + 3 * best]
count_declared(windows, owner)
local member = ARGV[5] .. ':' .. entry
if owner ~= entry or cost then
  member = member .. ':' .. owner .. ':' .. (cost or 0)
  if owner ~= entry then redis.call('HSET', KEYS[3], owner, in_flight(owner) + 1) end
  if cost and cost > 0 then redis.call('HSET', KEYS[14], owner, cost_in_flight(owner) + cost) end
end
redis.call('ZADD', KEYS[4], ARGV[4], member)
redis.call('HSET', KEYS[3], entry, best_count + 1)
mark(KEYS[9], entry, now)
local probe = 0
for _, id in ipairs({entry, credential}) do
  local released = trusted(KEYS[6], id)
  if released and released <= now then probe = 1 end
end
if probe == 1 then redis.call('HSET', KEYS[5], entry, member) end
return {best, probe, false, redis.call('HGET', KEYS[11], entry), best_refilled}
"""
)

# ARGV[4..]: cap, the attempt's lease member, entry, credential id, '1' if it was served;
# then what its answer wrote: 'record' (id, deadline), 'clear' (id, when the attempt
# started) or '' (nothing); then the request budget its headers announced: remaining,
# reset, limit (each '' for none); then the learned window after the answer, or ''; then the
# budgets' owner id (the entry's or its account's); then the token budget: remaining, reset,
# limit; then pairs (id, deadline): the same cooldown for the key's siblings in its account.
# Writes the answer first, so no other process can take the key between the two.
END = (
    _COMMON
    + _PRUNE_DEADLINES
    + _PRUNE
    + _RECORD_FUNCTION
    + """
local cap, member, entry, credential, owner = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[16]
if ARGV[9] == 'record' then record(ARGV[10], ARGV[11], cap)
elseif ARGV[9] == 'clear' then clear(ARGV[10], ARGV[11]) end
for i = 21, #ARGV, 2 do record(ARGV[i], ARGV[i + 1], cap) end
"""
    + KEEP_BUDGETS
    + """
if ARGV[15] ~= '' then
  redis.call('HSET', KEYS[11], entry, ARGV[15])
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

# An operator's clear. ARGV[1]: the credential's id; ARGV[2]: one scope's id, or "" for every
# scope and the credential-wide entries; ARGV[3]: now, ARGV[4]: the oldest clear worth
# keeping (wall ms). Attempts in flight (inflight, leases, costs) stay.
FORGET_CREDENTIAL = """
local credential, scope = ARGV[1], ARGV[2]
local cleared = redis.call('HGETALL', KEYS[15])
for index = 1, #cleared, 2 do
  if (tonumber(cleared[index + 1]) or 0) < tonumber(ARGV[4]) then
    redis.call('HDEL', KEYS[15], cleared[index])
  end
end
redis.call('HSET', KEYS[15], credential .. scope, ARGV[3])
local function matches(member)
  if string.sub(member, 1, 1) == 't' then member = string.sub(member, 2) end
  if scope ~= '' then return member == credential .. scope end
  return string.sub(member, 1, #credential) == credential
end
local function forget(key, members, remove)
  for _, member in ipairs(members) do
    if matches(member) then redis.call(remove, key, member) end
  end
end
for _, index in ipairs({1, 6, 8, 9, 10, 12}) do
  forget(KEYS[index], redis.call('ZRANGE', KEYS[index], 0, -1), 'ZREM')
end
for _, index in ipairs({5, 7, 11, 13}) do
  forget(KEYS[index], redis.call('HKEYS', KEYS[index]), 'HDEL')
end
return 1
"""
