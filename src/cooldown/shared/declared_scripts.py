"""The Lua of declared limits (`register(limits=)`): what each owner (a key's or its account's
entry, with the scope) started in each window, counted for the whole fleet in the admission's
own round trip (spliced into `START` in `cooldown.shared.scripts`).

ARGV[8] declares the windows: `;`-separated `id,limit,need,amount,width,ends`, where `need`
is what one more request needs left, `amount` what it counts, and a window either rolls in
slots of `width` ms (`ends` 0: a slot leaves the window 61 slots after it began, as the
process-local count does) or is a calendar day ending at `ends` (wall ms). With windows
declared, KEYS[17] is a hash `"<owner>|<id>"` -> `"<slot end>:<amount>,..."` (at most 61
slots each, the ended ones dropped) and KEYS[18] a zset of those fields -> their latest slot
end, so a field nobody uses any more leaves with its last slot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..store.backend import SharedWindow

__all__ = ["DECLARED", "windows_argument"]


def windows_argument(windows: Sequence[SharedWindow], to_wall_ms: Callable[[float], int]) -> str:
    """START's ARGV[8]: the windows, a calendar day's end read on the wall clock."""
    return ";".join(
        f"{w.id},{w.limit},{w.need},{w.amount},{w.width * 1000!r},"
        f"{0 if w.ends is None else to_wall_ms(w.ends)}"
        for w in windows
    )


DECLARED = """
local function declared_windows(spec)
  local windows = {}
  for id, most, need, amount, width, ends in
      string.gmatch(spec, '([^,;]+),(%d+),(%d+),(%d+),([%d.]+),(%d+)') do
    windows[#windows + 1] = {id = id, most = tonumber(most), need = tonumber(need),
      amount = tonumber(amount), width = tonumber(width), ends = tonumber(ends)}
  end
  if #windows > 0 then
    local ended = redis.call('ZRANGEBYSCORE', KEYS[18], '-inf', ARGV[1], 'LIMIT', 0, 64)
    for _, field in ipairs(ended) do
      redis.call('HDEL', KEYS[17], field)
      redis.call('ZREM', KEYS[18], field)
    end
  end
  return windows
end
local function live_slots(field)
  local slots, used = {}, 0
  for ends, amount in string.gmatch(redis.call('HGET', KEYS[17], field) or '', '(%d+):(%d+)') do
    ends, amount = tonumber(ends), tonumber(amount)
    if ends > now then
      slots[#slots + 1] = {ends, amount}
      used = used + amount
    end
  end
  table.sort(slots, function(a, b) return a[1] < b[1] end)
  return slots, used
end
local function declared_hold(windows, owner)
  local hold = 0
  for _, window in ipairs(windows) do
    if window.need > window.most then return tonumber(truncate) end
    local slots, used = live_slots(owner .. '|' .. window.id)
    local excess = used + window.need - window.most
    for _, slot in ipairs(slots) do
      if excess <= 0 then break end
      excess = excess - slot[2]
      if excess <= 0 then hold = math.max(hold, slot[1]) end
    end
  end
  return hold
end
local function count_declared(windows, owner)
  for _, window in ipairs(windows) do
    local field = owner .. '|' .. window.id
    local ends = window.ends
    if ends == 0 then ends = math.floor((math.floor(now / window.width) + 61) * window.width) end
    local slots = live_slots(field)
    local parts, counted, latest = {}, false, ends
    for _, slot in ipairs(slots) do
      local amount = slot[2]
      if slot[1] == ends then amount, counted = amount + window.amount, true end
      parts[#parts + 1] = string.format('%d:%d', slot[1], amount)
      latest = math.max(latest, slot[1])
    end
    if not counted then parts[#parts + 1] = string.format('%d:%d', ends, window.amount) end
    redis.call('HSET', KEYS[17], field, table.concat(parts, ','))
    redis.call('ZADD', KEYS[18], latest, field)
  end
end
"""
