"""The Lua that keeps the entry of a key its pool does not hold (a caller's own list): spliced
after `_COMMON` and the record function in `cooldown.shared.scripts` (`RECORD_FOREIGN`).

ARGV[4..7]: entry, deadline, cap, the most foreign entries per provider; KEYS are its
`KEY_NAMES` (1: deadlines, 6: released, 16: every foreign entry), then KEYS[17], the
provider's foreign entries.
"""

from __future__ import annotations

__all__ = ["KEEP_FOREIGN"]

# Kept only where the table has room (it never raises the overflow); past the most per
# provider the oldest is dropped. Returns {1 if kept, how many were dropped}.
KEEP_FOREIGN = """
local entry = ARGV[4]
if not trusted(KEYS[1], entry) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[6]) then
  return {0, 0}
end
local kept = record(entry, ARGV[5], ARGV[6])
local dropped = 0
redis.call('ZADD', KEYS[17], now, entry)
redis.call('ZADD', KEYS[16], now, entry)
local extra = redis.call('ZCARD', KEYS[17]) - tonumber(ARGV[7])
if extra > 0 then
  for _, oldest in ipairs(redis.call('ZRANGE', KEYS[17], 0, extra - 1)) do
    if redis.call('ZREM', KEYS[16], oldest) == 1 then  -- still foreign and kept: dropped
      if redis.call('ZREM', KEYS[1], oldest) == 1 then dropped = dropped + 1 end
      redis.call('ZREM', KEYS[6], oldest)
    end
  end
  redis.call('ZREMRANGEBYRANK', KEYS[17], 0, extra - 1)
end
return {kept, dropped}
"""
