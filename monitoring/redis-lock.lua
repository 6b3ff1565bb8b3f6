-- redis-lock's figures for prometheus-redis-exporter (Debian's package, and upstream's):
--   prometheus-redis-exporter -redis.addr redis://HOST:PORT -script /path/to/redis-lock.lua
-- The exporter runs this script at every scrape and exports each name/value pair it
-- returns as redis_script_values{key="NAME"}. Names are stable: every field of INFO lock
-- as the server prints it (lock_grants, lock_waiters, ...), each percentile of
-- lock_wait_usec and lock_hold_usec as its own figure (lock_wait_usec_p50, _p99,
-- _p99_9), and three figures of the locks clients wait for now, over every database
-- (LOCK.CONTENDED): lock_contended_keys, lock_contended_longest_wait_ms and
-- lock_contended_longest_held_ms (-1 when no contended key has a holder).
-- Cost: one INFO lock, and one LOCK.CONTENDED COUNT 1000 per database that has keys;
-- linear in the keys clients wait for, never in all locks. Read only.

local result = {}

local function add(name, value)
  table.insert(result, name)
  table.insert(result, tostring(value))
end

local info = redis.call('INFO', 'lock')
if not string.find(info, 'lock_grants:', 1, true) then
  -- No module here: no figures, so that RedisLockMetricsMissing can tell.
  return redis.error_reply('ERR redis-lock is not loaded on this server (INFO lock is empty)')
end
for line in string.gmatch(info, '[^\r\n]+') do
  local name, value = string.match(line, '^(lock_[%w_]+):(.+)$')
  if name then
    if string.find(value, '=', 1, true) then
      -- p50=1.000,p99=2.000,p99.9=3.000 (microseconds)
      for percentile, figure in string.gmatch(value, 'p([%d.]+)=([%d.]+)') do
        local suffix = (string.gsub(percentile, '%.', '_'))
        add(name .. '_p' .. suffix, figure)
      end
    else
      add(name, value)
    end
  end
end

local keys, longest_wait, longest_held = 0, 0, -1
local keyspace = redis.call('INFO', 'keyspace')
for db in string.gmatch(keyspace, 'db(%d+):') do
  redis.call('SELECT', tonumber(db))
  local listed = redis.call('LOCK.CONTENDED', 'COUNT', '1000')
  for _, entry in ipairs(listed) do
    keys = keys + 1
    for i = 1, #entry, 2 do
      local field, value = entry[i], entry[i + 1]
      if field == 'waited' and value > longest_wait then
        longest_wait = value
      elseif field == 'held' and value > longest_held then
        longest_held = value
      end
    end
  end
end
add('lock_contended_keys', keys)
add('lock_contended_longest_wait_ms', longest_wait)
add('lock_contended_longest_held_ms', longest_held)

return result
