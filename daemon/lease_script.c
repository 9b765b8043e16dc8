/* SPDX-License-Identifier: MIT */
/*
 * The one Lua script a host's daemon runs on Redis for a global limiter
 * (lease.c sends it; the tests run it alone to check its accounting).  One
 * run is one atomic step on Redis: it reads Redis's clock (TIME), releases
 * the leases whose hold is over, and takes, gives back or reports uses.
 *
 * KEYS: shmt:{NAME}:l, shmt:{NAME}:z, shmt:{NAME}:b (lease.c).
 * ARGV: 1 op ("take", "give" or "owe"), 2 L (the limit), 3 the hold in
 * microseconds, 4 the parameters hosts must agree on, 5 uses (asked,
 * given back or owed), 6 the lease id (give), 7 the born stamp the lease
 * was granted under (give), 8 the host, 9 K (a key pool's names, or 0),
 * 10 (give, key pools) the lease's start, as the take answered it.
 * Answer (SHMTD_LEASE_REPLY integers): {id, k, uses in flight, retry in
 * us, born, code (0, 1 waiting for the hold of a fresh Redis, 2 other
 * parameters), start (a key pool: the lease's first position on the
 * cursor, below P; the names start at start mod K)}.
 *
 * A key pool's leases are ranges of the fleet's grant cursor ('cur' in
 * KEYS[1], positions mod P = K x 2^30, exact in Lua's doubles): lease ID
 * holds [s:ID, e:ID), and the positions of the leases in flight run from
 * the oldest one's start to the cursor.  The script keeps that span within
 * L as well as the uses in flight, so the positions used in any window lie
 * within L consecutive ones, and each name (position mod K) is among them
 * at most L / K times.  A give-back returns a lease's last positions: the
 * cursor comes back over them if no lease came after (no name was handed
 * out there), and a lease with nothing left is forgotten.
 */
#include "lease_script.h"

const char shmtd_lease_lua[] =
    /* Redis before 5 replicates a script by its text unless told to
     * replicate its effects, and refuses writes after TIME otherwise. */
    "if redis.replicate_commands then redis.replicate_commands() end\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
    "local op, L, hold = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    /* A key pool's K names; positions on its cursor run mod P. */
    "local K = tonumber(ARGV[9])\n"
    "local P = K * 1073741824\n"
    "local F = function(x) return string.format('%d', x) end\n"
    "local born = tonumber(redis.call('HGET', KEYS[3], 'born') or '0')\n"
    /* The Redis process the records were last written by (its run_id,
     * new at every start).  Another one that kept them without an AOF
     * loaded them from an RDB file, which may be older than the leases
     * in flight: the records start over, as for a Redis without its
     * data.  A record without one (born set by hand, or by an older
     * script) is taken as this Redis's. */
    "local rid = string.match(redis.call('INFO', 'server'),\n"
    "  'run_id:(%x+)') or '?'\n"
    "local was = redis.call('HGET', KEYS[3], 'rid')\n"
    "if born ~= 0 and was and was ~= rid and not string.find(\n"
    "    redis.call('INFO', 'persistence'), 'aof_enabled:1', 1, true) then\n"
    "  born = 0\n"
    "end\n"
    "if born == 0 then\n"
    "  born = now\n"
    "  redis.call('HSET', KEYS[3], 'born', F(born))\n"
    "end\n"
    "if was ~= rid then redis.call('HSET', KEYS[3], 'rid', rid) end\n"
    /* Redis's wall clock may step back: the script's clock stands still
     * instead (a hold then lasts longer, never shorter). */
    "local last = tonumber(redis.call('HGET', KEYS[3], 'last') or '0')\n"
    "if now < last then now = last end\n"
    "redis.call('HSET', KEYS[3], 'last', F(now))\n"
    "if op == 'give' then\n"
    "  if tonumber(ARGV[7]) ~= born then return {0, 0, 0, 0, born, 0, 0} end\n"
    "  local f = 'n:' .. ARGV[6]\n"
    "  local n = tonumber(redis.call('HGET', KEYS[1], f) or '-1')\n"
    "  if n < 0 then return {0, 0, 0, 0, born, 0, 0} end\n"
    /* Only the host that holds a lease gives it back. */
    "  if redis.call('HGET', KEYS[1], 'h:' .. ARGV[6]) ~= ARGV[8] then\n"
    "    return {0, 0, 0, 0, born, 0, 0}\n"
    "  end\n"
    /* A key pool's lease must be the one that started where the take
     * said: an ID seen again (a failover to a replica behind on seq)
     * is another lease. */
    "  if K > 0 and redis.call('HGET', KEYS[1], 's:' .. ARGV[6]) ~=\n"
    "      ARGV[10] then\n"
    "    return {0, 0, 0, 0, born, 0, 0}\n"
    "  end\n"
    "  local u = math.min(tonumber(ARGV[5]), n)\n"
    "  redis.call('HSET', KEYS[1], f, F(n - u))\n"
    "  local inf = redis.call('HINCRBY', KEYS[1], 'inflight', F(-u))\n"
    /* A key pool: the positions given back are the lease's last ones;
     * the cursor comes back over them if no lease came after, and a
     * lease with nothing left stops counting (its positions unused). */
    "  if K > 0 then\n"
    "    local id = ARGV[6]\n"
    "    local e = tonumber(redis.call('HGET', KEYS[1], 'e:' .. id) or '-1')\n"
    "    if e >= 0 then\n"
    "      local c = tonumber(redis.call('HGET', KEYS[1], 'cur') or '-1')\n"
    "      local ne = (e - u) % P\n"
    "      redis.call('HSET', KEYS[1], 'e:' .. id, F(ne))\n"
    "      if c == e then redis.call('HSET', KEYS[1], 'cur', F(ne)) end\n"
    "    end\n"
    "    if n - u == 0 then\n"
    "      redis.call('HDEL', KEYS[1], f, 'h:' .. id, 's:' .. id, 'e:' .. id)\n"
    "      redis.call('ZREM', KEYS[2], id)\n"
    "    end\n"
    "  end\n"
    "  return {u, 0, inf, 0, born, 0, 0}\n"
    "end\n"
    "local p = redis.call('HGET', KEYS[1], 'params')\n"
    "if p and p ~= ARGV[4] then return {0, 0, 0, 0, born, 2, 0} end\n"
    "local inf = tonumber(redis.call('HGET', KEYS[1], 'inflight') or '0')\n"
    "local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', F(now))\n"
    "for _, id in ipairs(due) do\n"
    "  local f = 'n:' .. id\n"
    "  inf = inf - tonumber(redis.call('HGET', KEYS[1], f) or '0')\n"
    "  redis.call('HDEL', KEYS[1], f, 'h:' .. id, 's:' .. id, 'e:' .. id)\n"
    "end\n"
    "if #due > 0 then\n"
    "  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', F(now))\n"
    "end\n"
    "if inf < 0 then inf = 0 end\n"
    /* A key pool: the positions of the leases in flight run from the
     * oldest one's start to the cursor, and that span stays within L, so
     * any L positions in a row name each key L / K times. */
    "local span, cur = 0, 0\n"
    "if K > 0 then\n"
    "  cur = tonumber(redis.call('HGET', KEYS[1], 'cur') or '0')\n"
    "  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')\n"
    "  if first[2] then\n"
    "    local ids = redis.call('ZRANGEBYSCORE', KEYS[2], first[2], first[2])\n"
    "    for _, id in ipairs(ids) do\n"
    "      local s = redis.call('HGET', KEYS[1], 's:' .. id)\n"
    "      if s then span = math.max(span, (cur - tonumber(s)) % P) end\n"
    "    end\n"
    "  end\n"
    "end\n"
    "local want, k, code = tonumber(ARGV[5]), 0, 0\n"
    "if op == 'owe' then if K == 0 then k = want end\n"
    "elseif now < born + hold then code = 1\n"
    "else k = math.min(want, L - inf, L - span) end\n"
    "if k < 0 then k = 0 end\n"
    "local id, base = 0, 0\n"
    "if k > 0 then\n"
    "  id = redis.call('HINCRBY', KEYS[3], 'seq', 1)\n"
    "  redis.call('HSET', KEYS[1], 'n:' .. id, F(k), 'h:' .. id, ARGV[8])\n"
    "  redis.call('ZADD', KEYS[2], F(now + hold), id)\n"
    "  inf = inf + k\n"
    "  if K > 0 then\n"
    "    local e = (cur + k) % P\n"
    "    redis.call('HSET', KEYS[1], 's:' .. id, F(cur), 'e:' .. id, F(e),\n"
    "      'cur', F(e))\n"
    "    base = cur\n"
    "  end\n"
    "end\n"
    "redis.call('HSET', KEYS[1], 'inflight', F(inf), 'params', ARGV[4])\n"
    "local ttl = F(math.floor(hold / 1000) + 1000)\n"
    "redis.call('PEXPIRE', KEYS[1], ttl)\n"
    "redis.call('PEXPIRE', KEYS[2], ttl)\n"
    "local retry = 0\n"
    "if k == 0 then\n"
    "  if now < born + hold then retry = born + hold - now\n"
    "  else\n"
    "    local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')\n"
    "    if first[2] then retry = tonumber(first[2]) - now end\n"
    "  end\n"
    "end\n"
    "return {id, k, inf, retry, born, code, base}\n";
