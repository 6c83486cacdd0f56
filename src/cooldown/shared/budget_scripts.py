"""The Lua of shared budgets, spliced into the scripts that start and end attempts: reading
a budget's level as it refills, and keeping an answer's budget as of its request's start.

Both run after `_COMMON` (`now`, `trusted`, `mark`) in `cooldown.shared.scripts`; KEYS are
its `KEY_NAMES` (7: budgets, 8: resets, 13: refills).
"""

from __future__ import annotations

__all__ = ["KEEP_BUDGETS", "READ_BUDGETS"]

# A budget: remaining at `announced`, until `reset`; with the limit, it refills
# linearly towards it until the reset. Returns the level now, the reset, `when(need)`: when
# `need` units are there, the largest ever announced, and (when it refills) the remaining
# as announced, before any refill; nil when there is no live budget.
# A number that is not finite (tampered, or another program's) counts as absent.
READ_BUDGETS = """
local function finite(value)
  value = tonumber(value)
  if value and value == value and value > -math.huge and value < math.huge then return value end
  return nil
end
local function budget(member)
  local remaining = finite(redis.call('HGET', KEYS[7], member))
  local reset = trusted(KEYS[8], member)
  if not (remaining and reset and reset > now and remaining >= 0) then return nil end
  local refill = redis.call('HGET', KEYS[13], member) or ''
  local limit, announced, largest = string.match(refill, '^([^,]*),([^,]*),([^,]*)$')
  limit, announced, largest = finite(limit), finite(announced), finite(largest)
  local level, when, announced_remaining = remaining, function(need) return reset end, nil
  if limit and announced and limit > remaining and reset > announced then
    announced_remaining = remaining
    local span = reset - announced
    level = remaining + (limit - remaining) * math.min(1, math.max(0, now - announced) / span)
    when = function(need)
      return math.min(reset, announced + (need - remaining) * span / (limit - remaining))
    end
  end
  return level, reset, when, largest or remaining, announced_remaining
end
"""

# In END, after the answer's cooldowns. ARGV[8]: '1' when served; ARGV[12..14] and
# [17..19]: the request and token budgets announced (remaining, reset, limit; '' for none);
# ARGV[16]: their owner; ARGV[20]: when the answer's request started (wall ms). A budget
# kept from a later request is not replaced by an earlier one's answer arriving last, and
# refill runs from the stamp.
KEEP_BUDGETS = """
local stamp = tonumber(ARGV[20])
local function kept_stamp(budget)
  local refill = redis.call('HGET', KEYS[13], budget) or ''
  local live = trusted(KEYS[8], budget)
  if not (live and live > now) then return nil, refill end
  return tonumber(string.match(refill, '^[^,]*,([^,]*),')), refill
end
local function keep(budget, remaining, reset, limit)
  if remaining == '' then return false end
  local kept, refill = kept_stamp(budget)
  if stamp and kept and kept > stamp then return false end
  local largest = math.max(tonumber(limit) or 0, tonumber(remaining))
  local known = string.match(refill, ',([^,]*)$')
  if string.sub(budget, 1, 1) == 't' then largest = math.max(largest, tonumber(known) or 0) end
  redis.call('HSET', KEYS[7], budget, remaining)
  redis.call('HSET', KEYS[13], budget, limit .. ',' .. (stamp or ARGV[1]) .. ',' .. largest)
  mark(KEYS[8], budget, reset, KEYS[7], KEYS[13])
  return true
end
-- A served attempt started since the kept budget's stamp, whose answer did not replace it,
-- spent one of its requests: it stays spent when the attempt is released.
local function spend(budget)
  local kept = kept_stamp(budget)
  local remaining = tonumber(redis.call('HGET', KEYS[7], budget))
  if stamp and kept and remaining and stamp >= kept and remaining > 0 then
    redis.call('HSET', KEYS[7], budget, remaining - 1)
  end
end
local wrote = keep(owner, ARGV[12], ARGV[13], ARGV[14])
if not wrote and ARGV[8] == '1' then spend(owner) end
keep('t' .. owner, ARGV[17], ARGV[18], ARGV[19])
"""
