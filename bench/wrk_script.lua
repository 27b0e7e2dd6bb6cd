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
--   BENCH_THREADS  number of clients (threads), to split names between them in mode "own"
--   BENCH_RATE     per client: cycles (or GETs) per second on an absolute schedule; 0 or unset = closed loop
--   BENCH_AT_MOST  lock_at_most_for of each acquire
--   BENCH_TOKEN    API token for the Authorization header (unset: none sent)
--   BENCH_OUT      file the main state writes the samples to when the run ends

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

local mode = os.getenv("BENCH_MODE") or "own"
local names = tonumber(os.getenv("BENCH_NAMES") or "1")
local prefix = os.getenv("BENCH_PREFIX") or "bench-"
local nthreads = tonumber(os.getenv("BENCH_THREADS") or "1")
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

-- Main state: number the threads, collect their samples at the end.
local threads = {}

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

-- Thread state: one client.
acq_us, rel_us, get_us = {}, {}, {}
counts = { acq_ok = 0, acq_held = 0, acq_other = 0, rel_ok = 0, rel_other = 0, get_ok = 0, get_other = 0 }

local index = nil -- index of the name to acquire next
local lease_name, lease_token = nil, nil
local sending, sent_at = nil, 0
local next_at = nil -- when the next cycle (or GET) is due, in paced mode
local interval_us = rate > 0 and 1000000 / rate or 0

local function pick()
  if mode == "random" then
    index = math.random(0, names - 1)
  elseif index == nil then
    index = id
  else
    index = (index + nthreads) % names
  end
end

function init(args)
  math.randomseed(id * 7919 + 17)
  pick()
end

local function name_of(i)
  return string.format("%s%06d", prefix, i)
end

-- request() only reads state (wrk calls it once more than it sends, to check the script); response() moves it.
function request()
  sent_at = now_us()
  if mode == "get" then
    sending = "get"
    return wrk.format("GET", get_path, get_headers)
  end
  if lease_token ~= nil then
    sending = "release"
    return wrk.format("POST", "/v1/locks/" .. lease_name .. "/release", json_headers,
      '{"token":"' .. lease_token .. '"}')
  end
  sending = "acquire"
  return wrk.format("POST", "/v1/locks/" .. name_of(index) .. "/acquire", json_headers, acquire_body)
end

local function cycle_done()
  if next_at ~= nil then
    next_at = next_at + interval_us
  end
end

function response(status, headers, body)
  local elapsed = now_us() - sent_at
  if sending == "get" then
    get_us[#get_us + 1] = elapsed
    if status == 200 then counts.get_ok = counts.get_ok + 1 else counts.get_other = counts.get_other + 1 end
    cycle_done()
  elseif sending == "acquire" then
    acq_us[#acq_us + 1] = elapsed
    local token = status == 200 and string.match(body, '"token":"([^"]+)"') or nil
    if token ~= nil then
      counts.acq_ok = counts.acq_ok + 1
      lease_name, lease_token = name_of(index), token
    else
      if status == 409 then counts.acq_held = counts.acq_held + 1 else counts.acq_other = counts.acq_other + 1 end
      pick()
      cycle_done()
    end
  elseif sending == "release" then
    rel_us[#rel_us + 1] = elapsed
    if status == 200 then counts.rel_ok = counts.rel_ok + 1 else counts.rel_other = counts.rel_other + 1 end
    lease_name, lease_token = nil, nil
    pick()
    cycle_done()
  end
end

-- Paced mode only: wrk calls delay() before each request when the script defines it.
if rate > 0 then
  function delay()
    if lease_token ~= nil then
      return 0 -- a release goes out at once; only the start of a cycle is paced
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
