-- wrk script for the schedlock benchmark (driven by bench/loadgen.py; not meant to be run by hand).
--
-- wrk keeps one Lua state per thread, not per connection, and does not say which connection a response came
-- on. The harness therefore runs one connection per thread (-t N -c N): each state below is exactly one
-- client, so an acquire's token can be carried to its release and every request can be timed.
--
-- Environment (read once per state):
--   BENCH_MODE     own    acquire->release cycles over this client's own names (never contended)
--                  random acquire->release cycles over names picked at random (contended when names are few)
--                  get    GET BENCH_PATH again and again
--   BENCH_NAMES    number of names; BENCH_PREFIX their prefix (names are PREFIX000000, PREFIX000001, ...)
--   BENCH_THREADS  number of clients (threads), to split names between them in mode "own"; with the load split
--                  between wrk processes (one per server), the clients of all of them
--   BENCH_FIRST_CLIENT  the id of this process's first client (0 unless the load is split): client ids, and so
--                  names in mode "own" and random sequences, are unique across the processes
--   BENCH_RATE     per client: cycles (or GETs) per second on an absolute schedule; 0 or unset = closed loop
--   BENCH_AT_MOST  lock_at_most_for of each acquire
--   BENCH_TOKEN    API token for the Authorization header (unset: none sent)
--   BENCH_OUT      file the main state writes the samples to when the run ends
--   BENCH_PROTOCOL schedlock (default: its HTTP API) or etcd (the same try-lock through etcd's JSON gateway; the
--                  BENCH_ETCD_* variables, set by bench/etcd.py, hold the request templates and the lease policy)

local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clock_id, bench_timespec *tp);
]]
local CLOCK_MONOTONIC = 1
local timespec = ffi.new("bench_timespec")

local function now_us()
  ffi.C.clock_gettime(CLOCK_MONOTONIC, timespec)
  return tonumber(timespec.tv_sec) * 1000000 + tonumber(timespec.tv_nsec) / 1000
end

local bit = require("bit")
local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

-- etcd's JSON gateway takes keys and values in base64.
local function base64(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = bit.bor(bit.lshift(a, 16), bit.lshift(b or 0, 8), c or 0)
    for k = 0, 3 do
      if k <= #s - i + 1 then
        local v = bit.band(bit.rshift(n, 18 - 6 * k), 63)
        out[#out + 1] = B64:sub(v + 1, v + 1)
      else
        out[#out + 1] = "="
      end
    end
  end
  return table.concat(out)
end

local mode = os.getenv("BENCH_MODE") or "own"
local names = tonumber(os.getenv("BENCH_NAMES") or "1")
local prefix = os.getenv("BENCH_PREFIX") or "bench-"
local nthreads = tonumber(os.getenv("BENCH_THREADS") or "1")
local first_client = tonumber(os.getenv("BENCH_FIRST_CLIENT") or "0")
local rate = tonumber(os.getenv("BENCH_RATE") or "0")
local get_path = os.getenv("BENCH_PATH") or "/v1/locks"
local acquire_body = '{"lock_at_most_for":"' .. (os.getenv("BENCH_AT_MOST") or "30s") .. '","holder":"bench"}'
local json_headers = { ["Content-Type"] = "application/json" }
local get_headers = {}
local token = os.getenv("BENCH_TOKEN") -- an API token, sent as a bearer token on every request when set
if token ~= nil and token ~= "" then
  json_headers["Authorization"] = "Bearer " .. token
  get_headers["Authorization"] = "Bearer " .. token
end

-- etcd: the request templates (bench/etcd.py, the one place they are written) and the lease policy.
local etcd = nil
if os.getenv("BENCH_PROTOCOL") == "etcd" then
  etcd = {
    -- exact: a lease per attempt, revoked once the attempt is decided or the key released; revoke: the same, but
    -- the release is the revoke (the key goes with its lease); reuse: one lease per client, renewed each second
    exact = os.getenv("BENCH_ETCD_LEASE") ~= "reuse",
    release_by_revoke = os.getenv("BENCH_ETCD_LEASE") == "revoke",
    reuse_us = tonumber(os.getenv("BENCH_ETCD_REUSE_US")),
    ttl = os.getenv("BENCH_ETCD_TTL"),
  }
  for _, op in ipairs({ "grant", "acquire", "release", "revoke" }) do
    local path, body = string.match(assert(os.getenv("BENCH_ETCD_" .. string.upper(op))), "^(%S+) (.*)$")
    etcd[op] = { path = path, body = body } -- each variable: "PATH BODY-TEMPLATE"
  end
end

-- Main state: number the threads, collect their samples at the end.
local threads = {}

function setup(thread)
  thread:set("id", first_client + #threads)
  table.insert(threads, thread)
end

-- Thread state: one client.
acq_us, rel_us, get_us = {}, {}, {}
counts = { acq_ok = 0, acq_held = 0, acq_other = 0, rel_ok = 0, rel_other = 0, get_ok = 0, get_other = 0 }

local index = nil -- index of the name to acquire next (and, while held, of the name held)
local step = "acquire" -- the next request: acquire, release; with etcd also grant (before acquire) and revoke
local held = nil -- schedlock: the lease token; etcd: the token put as the key's value (base64)
local op_at = nil -- when the lock operation under way (acquire or release) sent its first request
local sending, sent_at = nil, 0
local next_at = nil -- when the next cycle (or GET) is due, in paced mode
local interval_us = rate > 0 and 1000000 / rate or 0
local lease_id, lease_at = nil, 0 -- etcd: the lease the next put uses (exact: also the one left to revoke)
local attempt, attempt_token = 0, nil -- etcd: the client makes its tokens; this attempt's, in base64
local keys = {} -- etcd: base64 of each name, made once

local function pick()
  if mode == "random" then
    index = math.random(0, names - 1)
  elseif index == nil then
    index = id
  else
    index = (index + nthreads) % names
  end
  attempt = attempt + 1
  if etcd ~= nil then
    -- Unique per client and attempt; the clock rather than math.random, so that the names drawn in mode "random"
    -- are the same sequence as schedlock's.
    local salt = math.floor(now_us()) % 0x80000000
    attempt_token = base64(string.format("bench-%d-%d-%08x", id, attempt, salt))
  end
end

function init(args)
  math.randomseed(id * 7919 + 17)
  pick()
end

local function name_of(i)
  return string.format("%s%06d", prefix, i)
end

local function key_of(i)
  local key = keys[i]
  if key == nil then
    key = base64(name_of(i))
    keys[i] = key
  end
  return key
end

local function etcd_request()
  local key = key_of(index)
  if step == "acquire" and (lease_id == nil or (not etcd.exact and sent_at - lease_at > etcd.reuse_us)) then
    return "grant", etcd.grant.path, string.format(etcd.grant.body, etcd.ttl)
  elseif step == "acquire" then
    return step, etcd.acquire.path, string.format(etcd.acquire.body, key, key, attempt_token, lease_id)
  elseif step == "release" then
    return step, etcd.release.path, string.format(etcd.release.body, key, held, key)
  end
  return step, etcd.revoke.path, string.format(etcd.revoke.body, lease_id)
end

-- request() only reads state (wrk calls it once more than it sends, to check the script); response() moves it.
function request()
  sent_at = now_us()
  if mode == "get" then
    sending = "get"
    return wrk.format("GET", get_path, get_headers)
  end
  if etcd ~= nil then
    local path, body
    sending, path, body = etcd_request()
    return wrk.format("POST", path, json_headers, body)
  end
  sending = step
  if step == "release" then
    return wrk.format("POST", "/v1/locks/" .. name_of(index) .. "/release", json_headers,
      '{"token":"' .. held .. '"}')
  end
  return wrk.format("POST", "/v1/locks/" .. name_of(index) .. "/acquire", json_headers, acquire_body)
end

local function cycle_done()
  pick()
  step = "acquire"
  if next_at ~= nil then
    next_at = next_at + interval_us
  end
end

-- An operation ends: its latency runs from its first request's send to its last response.
local function acquired(outcome)
  acq_us[#acq_us + 1] = now_us() - op_at
  op_at = nil
  counts["acq_" .. outcome] = counts["acq_" .. outcome] + 1
  if outcome == "ok" then step = "release" else cycle_done() end
end

local function released(ok)
  rel_us[#rel_us + 1] = now_us() - op_at
  op_at = nil
  if ok then counts.rel_ok = counts.rel_ok + 1 else counts.rel_other = counts.rel_other + 1 end
  held = nil
  cycle_done()
end

-- An exact lease is revoked once its attempt is decided; the operation ends with the revoke's answer.
local revoke_then = nil

local function etcd_response(status, body)
  local ok = status == 200 and string.find(body, '"succeeded":true', 1, true) ~= nil
  if sending == "grant" then
    lease_id = status == 200 and string.match(body, '"ID":"(%d+)"') or nil
    lease_at = sent_at
    if lease_id == nil then acquired("other") end
  elseif sending == "acquire" then
    local outcome = status ~= 200 and "other" or (ok and "ok" or "held")
    if ok then held = attempt_token end
    if etcd.exact and not ok then
      step, revoke_then = "revoke", function(revoked) acquired(revoked and outcome or "other") end
    else
      acquired(outcome)
    end
    if ok and etcd.release_by_revoke then
      step, revoke_then = "revoke", released
    end
  elseif sending == "release" then
    if etcd.exact then
      step, revoke_then = "revoke", function(revoked) released(ok and revoked) end
    else
      released(ok)
    end
  elseif sending == "revoke" then
    lease_id = nil
    revoke_then(status == 200)
  end
end

function response(status, headers, body)
  if op_at == nil then op_at = sent_at end
  if sending == "get" then
    get_us[#get_us + 1] = now_us() - sent_at
    op_at = nil
    if status == 200 then counts.get_ok = counts.get_ok + 1 else counts.get_other = counts.get_other + 1 end
    cycle_done()
  elseif etcd ~= nil then
    etcd_response(status, body)
  elseif sending == "acquire" then
    held = status == 200 and string.match(body, '"token":"([^"]+)"') or nil
    acquired(held ~= nil and "ok" or (status == 409 and "held" or "other"))
  elseif sending == "release" then
    released(status == 200)
  end
end

-- Paced mode only: wrk calls delay() before each request when the script defines it.
if rate > 0 then
  function delay()
    if step ~= "acquire" or op_at ~= nil then
      return 0 -- only the start of a cycle is paced; the rest of it goes out at once
    end
    local now = now_us()
    if next_at == nil then
      next_at = now + math.random() * interval_us -- spread the clients over one interval
    end
    local wait = next_at - now
    if wait <= 0 then
      return 0
    end
    return math.floor(wait / 1000) -- wrk's delay is in whole milliseconds
  end
end

local function write_samples(file, tag, samples)
  file:write(tag)
  for i = 1, #samples do
    file:write(" ", string.format("%.1f", samples[i]))
  end
  file:write("\n")
end

function done(summary, latency, requests)
  local file = assert(io.open(assert(os.getenv("BENCH_OUT"), "BENCH_OUT is not set"), "w"))
  local e = summary.errors
  file:write(string.format("summary %d %d %d %d %d %d %d\n", summary.duration, summary.requests,
    e.connect, e.read, e.write, e.status, e.timeout))
  for _, thread in ipairs(threads) do
    local c = thread:get("counts")
    file:write(string.format("counts %d %d %d %d %d %d %d\n", c.acq_ok, c.acq_held, c.acq_other, c.rel_ok,
      c.rel_other, c.get_ok, c.get_other))
    write_samples(file, "acquire", thread:get("acq_us"))
    write_samples(file, "release", thread:get("rel_us"))
    write_samples(file, "get", thread:get("get_us"))
  end
  file:close()
end
