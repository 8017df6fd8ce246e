--[[
skein's burst buffer for Slurm's burst_buffer/lua plugin: a scratch namespace per job on a skein
gateway, made and staged in before the job runs, staged out and destroyed after it. slurmctld
runs this file (it must sit beside slurm.conf, named burst_buffer.lua); the per-node prolog and
epilog (slurm/prolog, slurm/epilog) mount and unmount the namespace. docs/slurm.md is the admin's
guide: directives, configuration, failure policy.

Every hook that talks to the gateway runs `skeinctl --json` with the admin credentials of the
configuration's [controller] table. A hook that fails returns slurm.ERROR with a reason the job's
owner can act on; Slurm then holds the job with that reason (or, for job_process, rejects the
submission with it). Slurm 22.05 passes some hooks only the job id and the script's path: what
else they need comes from the script's directives and from `scontrol show job`.
--]]

local SCRIPT = "skein burst_buffer.lua"
local DEFAULT_CONFIG = "/etc/skein/slurm.toml"

-- Run by a plain Lua 5.1 interpreter (`lua5.1 burst_buffer.lua reap`: see the end of this file),
-- there is no slurm table; its logging goes to standard error.
local STANDALONE = slurm == nil and arg ~= nil
if STANDALONE then
	local function say(fmt, ...)
		io.stderr:write(os.date("%Y-%m-%dT%H:%M:%S ") .. string.format(fmt, ...) .. "\n")
	end
	slurm = { SUCCESS = 0, ERROR = -1, log_info = say, log_error = say }
end

-- ---------------------------------------------------------------- small helpers

local function log_info(fmt, ...)
	slurm.log_info("%s: " .. fmt, SCRIPT, ...)
end
local function log_error(fmt, ...)
	slurm.log_error("%s: " .. fmt, SCRIPT, ...)
end

local function trim(s)
	return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

-- One single-quoted shell word.
local function shq(s)
	return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function read_file(path)
	local f = io.open(path, "r")
	if not f then
		return nil
	end
	local text = f:read("*a")
	f:close()
	return text
end

-- Sizes as Slurm and skeinctl write them: 100G, 512M, 1T, plain bytes. Powers of 1024.
local SIZE_UNITS = { [""] = 1, K = 2 ^ 10, M = 2 ^ 20, G = 2 ^ 30, T = 2 ^ 40, P = 2 ^ 50 }
local function parse_size(text)
	local n, unit = tostring(text):upper():match("^(%d+)([KMGTP]?)I?B?$")
	if not n then
		return nil
	end
	return tonumber(n) * SIZE_UNITS[unit]
end

-- ---------------------------------------------------------------- configuration

-- A TOML subset: [table], [[array.of.tables]], key = "string" | 'string' | integer | true |
-- false | ["a", "b"] on one line, and # comments. docs/slurm.md shows the file.
local function parse_toml(text, path)
	local root = {}
	local current = root
	local lineno = 0
	local function value_of(v)
		v = trim(v)
		local s = v:match('^"(.-)"$') or v:match("^'(.-)'$")
		if s then
			return s
		end
		if v == "true" then
			return true
		end
		if v == "false" then
			return false
		end
		if v:match("^%-?%d+$") then
			return tonumber(v)
		end
		local inner = v:match("^%[(.*)%]$")
		if inner then
			local list = {}
			for item in inner:gmatch("[^,]+") do
				if trim(item) ~= "" then
					list[#list + 1] = value_of(item)
				end
			end
			return list
		end
		error(string.format("%s:%d: cannot read value %s", path, lineno, v), 0)
	end
	for line in (text .. "\n"):gmatch("(.-)\r?\n") do
		lineno = lineno + 1
		-- a # outside quotes starts a comment
		local quote, cut = nil, #line
		for i = 1, #line do
			local ch = line:sub(i, i)
			if quote then
				if ch == quote then
					quote = nil
				end
			elseif ch == '"' or ch == "'" then
				quote = ch
			elseif ch == "#" then
				cut = i - 1
				break
			end
		end
		local stripped = trim(line:sub(1, cut))
		if stripped ~= "" then
			local array = stripped:match("^%[%[%s*([%w_.-]+)%s*%]%]$")
			local tbl = stripped:match("^%[%s*([%w_.-]+)%s*%]$")
			if array then
				root[array] = root[array] or {}
				current = {}
				table.insert(root[array], current)
			elseif tbl then
				root[tbl] = root[tbl] or {}
				current = root[tbl]
			else
				local key, v = stripped:match("^([%w_-]+)%s*=%s*(.+)$")
				if not key then
					error(string.format("%s:%d: expected key = value, [table] or [[table]]", path, lineno), 0)
				end
				current[key] = value_of(v)
			end
		end
	end
	return root
end

-- Where the configuration is: $SKEIN_SLURM_CONFIG, else a "# skein: config=PATH" line in the
-- burst_buffer.conf beside this script (slurm.conf's directory), else /etc/skein/slurm.toml.
local function config_path()
	local env = os.getenv("SKEIN_SLURM_CONFIG")
	if env and env ~= "" then
		return env
	end
	local source = debug.getinfo(1, "S").source
	local dir = source:match("^@(.*)/[^/]*$")
	if dir then
		local conf = read_file(dir .. "/burst_buffer.conf")
		if conf then
			local p = conf:match("\n%s*#%s*skein:%s*config%s*=%s*(%S+)") or conf:match("^%s*#%s*skein:%s*config%s*=%s*(%S+)")
			if p then
				return p
			end
		end
	end
	return DEFAULT_CONFIG
end

local config_cache = { path = nil, mtime_key = nil, config = nil }

-- The configuration, read again whenever its text changes; nil and a message when it is bad.
local function load_config()
	local path = config_path()
	local text = read_file(path)
	if not text then
		return nil, "cannot read skein's Slurm configuration " .. path
	end
	if config_cache.path == path and config_cache.text == text then
		return config_cache.config
	end
	local ok, parsed = pcall(parse_toml, text, path)
	if not ok then
		return nil, "bad skein configuration: " .. parsed
	end
	local c = {
		path = path,
		gateway = parsed.gateway or {},
		controller = parsed.controller or {},
		staging = parsed.staging or {},
		node = parsed.node or {},
		pools = {},
	}
	if not c.gateway.address then
		return nil, path .. ": [gateway] needs address"
	end
	for _, p in ipairs(parsed.pool or {}) do
		if not p.name then
			return nil, path .. ": every [[pool]] needs a name"
		end
		local quantity = parse_size(p.capacity or "")
		if not quantity then
			return nil, path .. ": pool " .. p.name .. ": capacity must be a size, e.g. 10T"
		end
		local granularity = parse_size(p.granularity or "1M")
		if not granularity or granularity < 1 then
			return nil, path .. ": pool " .. p.name .. ": granularity must be a size, e.g. 1G"
		end
		p.quantity, p.granularity_bytes = quantity, granularity
		c.pools[p.name] = p
		c.pools[#c.pools + 1] = p
	end
	if #c.pools == 0 then
		return nil, path .. ": no [[pool]]: Slurm would have no pool to give jobs"
	end
	config_cache.path, config_cache.text, config_cache.config = path, text, c
	return c
end

-- ---------------------------------------------------------------- running commands

-- Runs a shell command; returns its exit status, its standard output and its standard error.
-- A detached command runs in a session of its own (setsid): slurmscriptd kills a hook's process
-- group when it cancels the hook, and a detached command then still runs to its end.
local function run(cmd, detached)
	local err_file = os.tmpname()
	if detached then
		cmd = "setsid -w " .. cmd
	end
	local p = io.popen(cmd .. " 2>" .. shq(err_file) .. "; echo \"__skein_rc=$?\"")
	local out = p:read("*a")
	p:close()
	local err = read_file(err_file) or ""
	os.remove(err_file)
	local rc = tonumber(out:match("__skein_rc=(%d+)%s*$")) or 255
	out = out:gsub("__skein_rc=%d+%s*$", "")
	return rc, out, err
end

-- skeinctl with the controller's admin credentials. Returns ok, stdout, and a reason on failure.
local function skeinctl(c, args, detached)
	local ctl = c.controller
	local env = { "SKEIN_GATEWAY=" .. shq(c.gateway.address) }
	local function put(name, value)
		if value and value ~= "" then
			env[#env + 1] = name .. "=" .. shq(value)
		end
	end
	put("SKEIN_CA_FILE", c.gateway.ca_file)
	put("SKEIN_TLS_SERVER_NAME", c.gateway.tls_server_name)
	put("SKEIN_ADMIN_CERT", ctl.admin_cert)
	put("SKEIN_ADMIN_KEY", ctl.admin_key)
	put("SKEIN_ADMIN_TOKEN_FILE", ctl.admin_token_file)
	local cmd = "env " .. table.concat(env, " ") .. " " .. shq(ctl.skeinctl or "skeinctl") .. " --json " .. args
	local rc, out, err = run(cmd, detached)
	if rc == 0 then
		return true, out
	end
	-- skeinctl says what went wrong on stderr ("skeinctl: ..."), and as JSON on stdout.
	local reason = err:match("skeinctl: ([^\n]+)") or out:match('"message"%s*:%s*"(.-)"') or trim(err)
	if reason == "" then
		reason = "skeinctl exited with status " .. rc
	end
	return false, out, reason
end

-- ---------------------------------------------------------------- directives

local SKEIN_KEYS = {
	width = "a whole number of backends, e.g. width=4",
	stripe_size = "a size, e.g. stripe_size=4M",
	layout = "striped or union",
	inodes = "a whole number of files and directories, e.g. inodes=1000000",
	lifetime = "a duration, e.g. lifetime=2d",
	stage_in = "SOURCE:DEST, e.g. stage_in=/data/in:/",
	stage_out = "SOURCE:DEST, e.g. stage_out=/results:/data/out/$SLURM_JOB_ID",
	verify = "yes or no",
}

-- A path as directives write it: absolute, no "." or ".." parts.
local function clean_path(p)
	if p:sub(1, 1) ~= "/" then
		return nil
	end
	local parts = {}
	for part in p:gmatch("[^/]+") do
		if part == "." or part == ".." then
			return nil
		end
		parts[#parts + 1] = part
	end
	return "/" .. table.concat(parts, "/")
end

-- The first '$' reference in a staging path that expand() does not replace ($HOME, $USERNAME,
-- ${USER without its brace, a lone '$'), or nil. Such a path was copied with the '$' in its
-- name: every array task's results into one directory literally named $SLURM_ARRAY_TASK_ID.
local function unknown_variable(path)
	local known = { SLURM_JOB_ID = true, SLURM_JOB_USER = true, USER = true }
	for at in path:gmatch("()%$") do
		local open, name, close = path:match("^%$({?)([%w_]*)(}?)", at)
		if not known[name] or (open == "{" and close ~= "}") then
			return path:sub(at, at + #open + #name + #close)
		end
	end
	return nil
end

-- Parses the #BB_LUA lines of a job script. Returns the request, or nil and what is wrong.
-- request = { pool = NAME or nil, capacity = TEXT or nil, skein = true when a skein line was
-- given, width, stripe_size, layout, inodes, lifetime, verify, stage_in = {{src, dest}},
-- stage_out = {{src, dest}} }
local function parse_directives(script_text)
	local r = { stage_in = {}, stage_out = {} }
	for line in (script_text .. "\n"):gmatch("(.-)\r?\n") do
		local body = line:match("^#BB_LUA%s+(.*)$") or line:match("^#BB_LUA$")
		if body then
			local words = {}
			for w in body:gmatch("%S+") do
				words[#words + 1] = w
			end
			if words[1] == "skein" then
				r.skein = true
				for i = 2, #words do
					local key, value = words[i]:match("^([%w_]+)=(.+)$")
					if not key or not SKEIN_KEYS[key] then
						local known = {}
						for k in pairs(SKEIN_KEYS) do
							known[#known + 1] = k
						end
						table.sort(known)
						return nil, string.format("unknown skein option '%s' (known: %s)", words[i], table.concat(known, ", "))
					end
					local bad = "skein option " .. words[i] .. ": expected " .. SKEIN_KEYS[key]
					if key == "width" or key == "inodes" then
						if not value:match("^%d+$") or tonumber(value) < 1 then
							return nil, bad
						end
						r[key] = tonumber(value)
					elseif key == "stripe_size" then
						if not parse_size(value) then
							return nil, bad
						end
						r.stripe_size = value
					elseif key == "layout" then
						if value ~= "striped" and value ~= "union" then
							return nil, bad
						end
						r.layout = value
					elseif key == "lifetime" then
						if not value:match("^%d+[smhd]?$") then
							return nil, bad
						end
						r.lifetime = value
					elseif key == "verify" then
						if value ~= "yes" and value ~= "no" then
							return nil, bad
						end
						r.verify = value == "yes"
					else -- stage_in, stage_out
						local src, dest = value:match("^([^:]+):([^:]+)$")
						local csrc, cdest = src and clean_path(src), dest and clean_path(dest)
						if not csrc or not cdest then
							return nil, bad .. " (two absolute paths without '..', joined by ':')"
						end
						local unknown = unknown_variable(value)
						if unknown then
							return nil, bad .. ": " .. unknown .. " is not a variable skein knows "
								.. "($SLURM_JOB_ID, $SLURM_JOB_USER, $USER; a '$' of the name itself "
								.. "cannot be staged)"
						end
						table.insert(r[key], { csrc, cdest })
					end
				end
			else
				-- Slurm's own pool= and capacity= (Slurm checks their pairing itself).
				for _, w in ipairs(words) do
					local key, value = w:match("^([%w_]+)=(.*)$")
					if key == "pool" then
						r.pool = value
					elseif key == "capacity" then
						r.capacity = value
					end
				end
			end
		end
	end
	return r
end

-- The job's request and its pool's configuration; nil and a reason when it is not skein's.
local function job_request(c, job_script)
	local text = read_file(job_script)
	if not text then
		return nil, "cannot read the job script " .. tostring(job_script)
	end
	local r, problem = parse_directives(text)
	if not r then
		return nil, problem
	end
	r.pool_config = r.pool and c.pools[r.pool]
	return r
end

-- $SLURM_JOB_ID, ${SLURM_JOB_ID}, $SLURM_JOB_USER and $USER in a staging path, each a whole
-- name ($USERNAME is not $USER). Anything else after a '$' stays as it is: job_process refuses it.
local function expand(path, job_id, user)
	local values = { SLURM_JOB_ID = job_id, SLURM_JOB_USER = user, USER = user }
	return (path:gsub("%$({?)([%w_]*)(}?)", function(open, name, close)
		if values[name] == nil or (open == "{" and close ~= "}") then
			return nil -- kept as it was
		end
		return values[name] .. (open == "" and close or "")
	end))
end

-- Is PATH below one of the [staging] roots allowed for USER?
local function staging_allowed(c, path, user)
	local roots = c.staging.allow or {}
	for _, root in ipairs(roots) do
		local r = expand(root, "", user):gsub("/+$", "")
		if path == r or path:sub(1, #r + 1) == r .. "/" or r == "" then
			return true
		end
	end
	return false
end

local function job_namespace_id(c, job_id)
	return (c.gateway.job_prefix or "") .. job_id
end

-- The staging source or destination outside the job namespace.
local function outside(c, path)
	return (c.staging.namespace or "default") .. ":" .. path
end

-- Checks the job's staging paths for its user; returns nil or a reason.
local function check_staging(c, r, job_id, user)
	for _, dir in ipairs({ "stage_in", "stage_out" }) do
		for _, pair in ipairs(r[dir]) do
			local theirs = expand(dir == "stage_in" and pair[1] or pair[2], job_id, user)
			if not staging_allowed(c, theirs, user) then
				local roots = {}
				for _, root in ipairs(c.staging.allow or {}) do
					roots[#roots + 1] = expand(root, job_id, user)
				end
				return string.format("%s path %s is outside what user %s may stage (%s)", dir, theirs, user,
					#roots > 0 and table.concat(roots, ", ") or "this cluster allows no staging")
			end
		end
	end
	return nil
end

-- The name of the user with `uid`. A job's user is never taken from scontrol's text: its job
-- name and comment are the user's own, and a name holding "UserId=someone(N)" would pass for
-- that user, whose files the staging (run with the gateway's admin rights) would then copy.
local function user_of_uid(uid)
	if not uid then
		return nil
	end
	local rc, out = run("getent passwd " .. shq(uid))
	if rc == 0 then
		return out:match("^([^:]+)")
	end
	return nil
end

-- The job's user for the data hooks, which are given no uid: the owner its namespace was made
-- for at setup, from the uid slurmctld gave setup.
local function user_of_namespace(c, job_id)
	local ok, out = skeinctl(c, "ns usage " .. shq(job_namespace_id(c, job_id)))
	if not ok then
		return nil
	end
	return user_of_uid(out:match('"uid"%s*:%s*(%d+)'))
end

local function fail(job_id, what, reason)
	local msg = string.format("skein: %s: %s", what, reason)
	log_error("JobId=%s %s", tostring(job_id), msg)
	return slurm.ERROR, msg
end

-- What a namespace's lifetime is at least beyond the job's time limit: the wait between setup and
-- the job's start, and its stage-out.
local LIFETIME_SLACK_S = 86400

-- ---------------------------------------------------------------- the reaper

--[[ A job's namespace outlives its job when the teardown never ran to its end: Slurm 22.05 kills
a teardown it has just started when the job's cancel flushes its scripts, and gives up on a
teardown after three failures. The reaper destroys the namespaces that this configuration made
(id job_prefix + JOBID, label slurm_job=JOBID, label slurm_cluster = [controller] cluster) for
jobs that
  - Slurm no longer knows (purged after MinJobAge), or
  - ended (a final JobState) with BurstBufferState teardown, teardown-fail (Slurm gave up on it)
    or complete, reap_grace_s or more ago (their teardown had that long to finish).
A job still pending, running or staging out keeps its namespace: a failed stage-out leaves it for
the user or admin to rescue. The reaper also keeps such a job's namespace alive: where its expiry
comes before the job's end (squeue's, which follows a time limit raised while the job runs; now for
a job pending or staging out) and a day, it renews it to an hour past that (`skeinctl ns renew`,
at most the gateway's max_lifetime from when it was made): a job that waits or runs longer than
its namespace's lifetime foresaw does not lose its scratch. slurm_bb_pools, which slurmctld calls
about every 30 s, starts the reaper in the background (`[controller] reap = false` turns that
off); an admin can run it by hand: `lua5.1 burst_buffer.lua reap [--dry-run]`. ]]

local FINAL_JOB_STATES = { BOOT_FAIL = true, CANCELLED = true, COMPLETED = true, DEADLINE = true, FAILED = true,
	NODE_FAIL = true, OUT_OF_MEMORY = true, PREEMPTED = true, TIMEOUT = true }

-- scontrol's times (2026-12-03T07:05:00, local time) as seconds since the epoch; nil for others.
local function slurm_time(text)
	local y, mo, d, h, mi, sec = tostring(text):match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)$")
	if not y then
		return nil
	end
	return os.time({ year = tonumber(y), month = tonumber(mo), day = tonumber(d), hour = tonumber(h), min = tonumber(mi),
		sec = tonumber(sec) })
end

-- Every job slurmctld knows, by id: { state, end_time }, from squeue's fields (one element of a
-- job array a line). Never from `scontrol show job`'s text: a job's name, comment, directives or
-- mail address may hold " JobState=COMPLETED EndTime=..." before or after the real fields. nil and
-- a reason when squeue cannot say.
local function known_jobs()
	local rc, out, err = run("squeue -h -r -t all -o '%A|%T|%e'")
	if rc ~= 0 then
		return nil, "squeue failed: " .. trim(err ~= "" and err or out)
	end
	local jobs = {}
	for line in out:gmatch("[^\n]+") do
		local id, state, ends = line:match("^%s*(%d+)|(%S+)|(%S*)%s*$")
		if id then
			jobs[id] = { state = state, end_time = slurm_time(ends) }
		end
	end
	return jobs
end

-- A job's BurstBufferState from its own record (scontrol has no fixed format for it): the last
-- such field, after the script's directives and comment. Only the job's own text is in that
-- record, so nothing another user wrote can pass for it. nil when scontrol cannot say.
local function bb_state_of(job_id)
	local rc, out = run("scontrol show job -o " .. shq(job_id))
	if rc ~= 0 then
		return nil
	end
	local state
	for s in out:gmatch("%sBurstBufferState=(%S+)") do
		state = s
	end
	return state
end

-- The job namespaces this configuration made: a list of { id, job, entry } (entry: its object in
-- `ns list --json`).
local function our_namespaces(c)
	local ok, out, reason = skeinctl(c, "ns list")
	if not ok then
		return nil, reason
	end
	local list = {}
	local namespaces = out:match('"job_namespaces"%s*:%s*(%b[])') or "[]"
	for obj in namespaces:gmatch("%b{}") do
		local id = obj:match('"job_id"%s*:%s*"(.-)"')
		local labels = {}
		for k, v in (obj:match('"labels"%s*:%s*(%b{})') or "{}"):gmatch('"([^"]+)"%s*:%s*"(.-)"') do
			labels[k] = v
		end
		local job = labels.slurm_job
		if id and job and id == job_namespace_id(c, job) and labels.slurm_cluster == c.controller.cluster then
			list[#list + 1] = { id = id, job = job, entry = obj }
		end
	end
	return list
end

-- Why job's namespace may go, or nil while the job may still need it.
local function reap_reason(job_id, job, grace, now)
	if not job then
		return "Slurm no longer knows job " .. job_id
	end
	if not (FINAL_JOB_STATES[job.state] and job.end_time and now - job.end_time >= grace) then
		return nil
	end
	-- Ended: its namespace may go once the burst buffer is done with it (no stage-out under way).
	local bb_state = bb_state_of(job_id)
	if bb_state == "teardown" or bb_state == "teardown-fail" or bb_state == "complete" then
		return string.format("job %s ended %d s ago (%s) and its teardown did not remove it (BurstBufferState=%s)",
			job_id, now - job.end_time, job.state, bb_state)
	end
	return nil
end

-- How far a renewal goes past what a job needs, so that a job's namespace is renewed about once
-- every two hours while its job pends, and once when it starts.
local RENEW_MARGIN_S = 3600

-- The expiry a namespace of a job Slurm still has (not ended) needs: the job's end and the slack;
-- nil for a job that ended.
local function needed_expiry(job, now)
	if not job or FINAL_JOB_STATES[job.state] then
		return nil
	end
	local ends = job.end_time
	if not ends or ends < now then
		ends = now -- pending (no end yet), or staging out
	end
	return ends + LIFETIME_SLACK_S
end

-- One pass of the reaper; returns the number of namespaces destroyed (or that would be), or nil
-- and a reason.
local function reap(c, dry_run)
	-- The namespaces first, then the jobs: a namespace in the list was made for a job that
	-- existed before the jobs are read, so a job missing from them is gone, not yet to come.
	local namespaces, why = our_namespaces(c)
	if not namespaces then
		return nil, "cannot list job namespaces: " .. why
	end
	if #namespaces == 0 then
		return 0
	end
	local jobs, problem = known_jobs()
	if not jobs then
		return nil, problem
	end
	local grace = tonumber(c.controller.reap_grace_s) or 30
	local now = os.time()
	local count = 0
	for _, n in ipairs(namespaces) do
		local reason = reap_reason(n.job, jobs[n.job], grace, now)
		local needed = needed_expiry(jobs[n.job], now)
		local expires = tonumber(n.entry:match('"expires_s"%s*:%s*(%d+)'))
		if needed and expires and expires < needed - RENEW_MARGIN_S then
			local lifetime = needed + RENEW_MARGIN_S - now
			if dry_run then
				log_info("reap: would renew namespace %s for %d s: job %s (%s) needs it until %d", n.id,
					lifetime, n.job, jobs[n.job].state, needed)
			else
				local ok, out, failure = skeinctl(c, "ns renew " .. shq(n.id) .. " --lifetime " .. lifetime .. "s")
				if ok then
					log_info("reap: renewed namespace %s: job %s (%s) needs it until %d; it expires at %s", n.id,
						n.job, jobs[n.job].state, needed, out:match('"expires_s"%s*:%s*(%d+)') or "?")
				else
					log_error("reap: cannot renew namespace %s of job %s: %s", n.id, n.job, failure)
				end
			end
		end
		if reason then
			count = count + 1
			if dry_run then
				log_info("reap: would destroy namespace %s: %s", n.id, reason)
			else
				local ok, _, failure = skeinctl(c, "ns destroy " .. shq(n.id) .. " --wait-ms " ..
					tostring(c.controller.destroy_wait_ms or 10000))
				if ok then
					log_info("reap: destroyed namespace %s: %s", n.id, reason)
				else
					log_error("reap: cannot destroy namespace %s (%s): %s", n.id, reason, failure)
				end
			end
		end
	end
	return count
end

-- Starts one pass of the reaper in the background, in a session of its own, unless one still
-- runs (flock). Its lines go to [controller] reaper_log.
local function start_reaper(c)
	if c.controller.reap == false then
		return
	end
	local script = debug.getinfo(1, "S").source:match("^@(.*)$")
	if not script then
		return
	end
	local log = c.controller.reaper_log or "/var/log/skein-slurm-reaper.log"
	local lua = c.controller.lua or "lua5.1"
	local missing = "echo \"$(date +%Y-%m-%dT%H:%M:%S) " .. SCRIPT .. ": reap: its interpreter ([controller] lua, "
		.. "default lua5.1) is not installed: install Debian's lua5.1\""
	os.execute(string.format("(command -v %s >/dev/null || %s; SKEIN_SLURM_CONFIG=%s setsid flock -n -E 0 %s %s %s reap) "
		.. "</dev/null >>%s 2>&1 &", shq(lua), missing, shq(c.path), shq(log .. ".lock"), shq(lua), shq(script), shq(log)))
end

-- ---------------------------------------------------------------- hooks

--[[ slurm_bb_job_process (synchronous, in slurmctld: no gateway calls). Rejects a submission whose
skein directives are wrong, with a message that says what is wrong. ]]
function slurm_bb_job_process(job_script, ...)
	local c, problem = load_config()
	if not c then
		log_error("%s", problem)
		return slurm.ERROR, "skein: the burst buffer is misconfigured (see slurmctld's log)"
	end
	local r, bad = job_request(c, job_script)
	if not r then
		return slurm.ERROR, "skein: " .. bad
	end
	if r.pool and not r.pool_config then
		local names = {}
		for _, p in ipairs(c.pools) do
			names[#names + 1] = p.name
		end
		return slurm.ERROR, string.format("skein: unknown burst buffer pool '%s' (pools: %s)", r.pool, table.concat(names, ", "))
	end
	if r.skein and not r.pool_config then
		return slurm.ERROR, string.format("skein: '#BB_LUA skein ...' needs a line '#BB_LUA pool=%s capacity=SIZE'", c.pools[1].name)
	end
	if r.pool_config and not r.capacity then
		return slurm.ERROR, "skein: pool=" .. r.pool .. " needs capacity=SIZE (the scratch quota, e.g. capacity=100G)"
	end
	if r.pool_config and not parse_size(r.capacity) then
		return slurm.ERROR, "skein: capacity=" .. r.capacity .. " is not a size (e.g. 100G)"
	end
	if (#r.stage_in > 0 or #r.stage_out > 0) and #(c.staging.allow or {}) == 0 then
		return slurm.ERROR, "skein: this cluster allows no staging ([staging] allow is empty)"
	end
	return slurm.SUCCESS
end

--[[ slurm_bb_pools (synchronous): the configured pools, as Slurm accounts them. ]]
function slurm_bb_pools()
	local c, problem = load_config()
	if not c then
		log_error("%s", problem)
		return slurm.ERROR, problem
	end
	local items = {}
	for _, p in ipairs(c.pools) do
		items[#items + 1] = string.format('{"id":"%s","quantity":%.0f,"granularity":%.0f}', p.name, p.quantity, p.granularity_bytes)
	end
	start_reaper(c)
	return slurm.SUCCESS, '{"pools":[' .. table.concat(items, ",") .. "]}"
end

-- A job's time limit in seconds, from squeue's %l ("UNLIMITED", "D-HH:MM:SS", "D-HH:MM", "D-HH",
-- "HH:MM:SS", "MM:SS", "MM"); math.huge when it has none, nil when squeue cannot say.
local function time_limit_s(job_id)
	local rc, out = run("squeue -h -j " .. shq(job_id) .. " -o '%l'")
	local text = rc == 0 and trim(out) or ""
	if text == "UNLIMITED" or text == "INFINITE" then
		return math.huge
	end
	local days, rest = text:match("^(%d+)-([%d:]+)$")
	rest = rest or text
	if not rest:match("^%d+$") and not rest:match("^%d+:%d+$") and not rest:match("^%d+:%d+:%d+$") then
		return nil
	end
	local n = {}
	for v in rest:gmatch("%d+") do
		n[#n + 1] = tonumber(v)
	end
	local h, m, sec = 0, 0, 0
	if days then -- D-HH, D-HH:MM, D-HH:MM:SS
		h, m, sec = n[1], n[2] or 0, n[3] or 0
	elseif #n == 3 then
		h, m, sec = n[1], n[2], n[3]
	elseif #n == 2 then
		m, sec = n[1], n[2]
	else
		m = n[1]
	end
	return (tonumber(days) or 0) * 86400 + h * 3600 + m * 60 + sec
end

--[[ slurm_bb_setup (asynchronous): makes the job's namespace, owned by the job's user, with the
capacity as its quota. Idempotent (skeinctl ns create is). ]]
function slurm_bb_setup(job_id, uid, gid, pool, bb_size, job_script)
	local c, problem = load_config()
	if not c then
		return fail(job_id, "setup", problem)
	end
	local r, bad = job_request(c, job_script)
	if not r then
		return fail(job_id, "setup", bad)
	end
	local p = c.pools[pool] or r.pool_config
	if not p then
		return fail(job_id, "setup", "pool '" .. tostring(pool) .. "' is not skein's")
	end
	if #r.stage_in > 0 or #r.stage_out > 0 then
		local user = user_of_uid(uid)
		if not user then
			return fail(job_id, "setup", "cannot tell the job's user (getent passwd " .. tostring(uid) .. ")")
		end
		local refused = check_staging(c, r, job_id, user)
		if refused then
			return fail(job_id, "setup", refused)
		end
	end
	local args = { "ns create", shq(job_namespace_id(c, job_id)), "--uid", shq(uid), "--gid", shq(gid),
		"--quota-bytes", shq(string.format("%.0f", tonumber(bb_size) or parse_size(r.capacity or "") or 0)),
		"--label", shq("slurm_job=" .. job_id) }
	local function opt(flag, value)
		if value then
			args[#args + 1] = flag .. " " .. shq(value)
		end
	end
	opt("--pool", p.gateway_pool)
	opt("--layout", r.layout or p.layout)
	opt("--width", r.width or p.width)
	opt("--stripe-size", r.stripe_size or p.stripe_size)
	opt("--quota-inodes", r.inodes or p.inodes)
	-- Without a lifetime asked for, the namespace lives as long as the job may, and a day more:
	-- the gateway's default_lifetime would destroy the scratch of a job that runs longer.
	local lifetime, derived = r.lifetime or p.lifetime, false
	if not lifetime then
		local limit = time_limit_s(job_id)
		if limit then
			derived = true
			lifetime = limit == math.huge and "36500d" or string.format("%.0fs", limit + LIFETIME_SLACK_S)
		else
			log_error("JobId=%s: squeue cannot say the job's time limit: its namespace gets the gateway's default_lifetime",
				job_id)
		end
	end
	opt("--lifetime", lifetime)
	local lifetime_at = #args
	if c.controller.cluster then
		opt("--label", "slurm_cluster=" .. c.controller.cluster)
	end
	local ok, _, reason = skeinctl(c, table.concat(args, " "))
	-- More than the gateway allows (max_lifetime, which its refusal says in seconds): the most.
	local max = not ok and derived and reason and reason:match("more than max_lifetime %((%d+) s%)")
	if max then
		log_info("JobId=%s: lifetime %s is more than the gateway's max_lifetime: %s s", job_id, lifetime, max)
		args[lifetime_at] = "--lifetime " .. shq(max .. "s")
		ok, _, reason = skeinctl(c, table.concat(args, " "))
	end
	if not ok then
		return fail(job_id, "cannot create the job's scratch namespace", reason)
	end
	log_info("JobId=%s: made scratch namespace %s (uid %s, gid %s, %s bytes, pool %s)", job_id,
		job_namespace_id(c, job_id), uid, gid, bb_size, pool)
	return slurm.SUCCESS
end

-- Runs one staging operation to its end; nil, or a reason.
local function stage(c, job_id, direction, src, dest, verify)
	local args = string.format("stage %s %s %s %s --wait%s", direction, shq(job_namespace_id(c, job_id)), shq(src), shq(dest),
		verify and " --verify" or "")
	local ok, out, reason = skeinctl(c, args)
	if ok then
		return nil
	end
	-- The last JSON line is the operation's final state; its error and failed paths say why.
	local last = ""
	for line in out:gmatch("[^\n]+") do
		last = line
	end
	local err = last:match('"error"%s*:%s*"(.-)"')
	local first_failed = last:match('"failed"%s*:%s*%[%s*"(.-)"')
	local state = last:match('"state"%s*:%s*"(%a+)"')
	local why = (err and err ~= "" and err) or first_failed or reason
	if state then
		why = state .. ": " .. why
	end
	return why
end

--[[ slurm_bb_data_in (asynchronous): each stage_in, in order, waited for. ]]
function slurm_bb_data_in(job_id, job_script, ...)
	local c, problem = load_config()
	if not c then
		return fail(job_id, "stage-in", problem)
	end
	local r, bad = job_request(c, job_script)
	if not r then
		return fail(job_id, "stage-in", bad)
	end
	if #r.stage_in == 0 then
		return slurm.SUCCESS
	end
	local user = user_of_namespace(c, job_id)
	if not user then
		return fail(job_id, "stage-in", "cannot tell the job's user (its namespace's owner)")
	end
	-- Checked again: what setup allowed was for this user, and the paths it names are theirs.
	local refused = check_staging(c, r, job_id, user)
	if refused then
		return fail(job_id, "stage-in", refused)
	end
	for _, pair in ipairs(r.stage_in) do
		local src = expand(pair[1], job_id, user)
		local why = stage(c, job_id, "in", outside(c, src), expand(pair[2], job_id, user), r.verify)
		if why then
			return fail(job_id, "stage-in of " .. src .. " failed", why)
		end
		log_info("JobId=%s: staged in %s to %s", job_id, src, pair[2])
	end
	return slurm.SUCCESS
end

function slurm_bb_real_size(job_id, ...)
	return slurm.SUCCESS
end

--[[ slurm_bb_paths (synchronous): SKEIN_SCRATCH, where the prolog mounts the namespace. ]]
function slurm_bb_paths(job_id, job_script, path_file, ...)
	local c, problem = load_config()
	if not c then
		return fail(job_id, "paths", problem)
	end
	local r = job_request(c, job_script)
	if not r or not r.pool_config then
		return slurm.SUCCESS
	end
	local root = (c.node.mount_root or "/scratch/job"):gsub("/+$", "")
	local f = io.open(path_file, "w")
	if not f then
		return fail(job_id, "paths", "cannot write " .. path_file)
	end
	f:write("SKEIN_SCRATCH=" .. root .. "/" .. job_id .. "\n")
	f:close()
	return slurm.SUCCESS
end

function slurm_bb_pre_run(job_id, ...)
	return slurm.SUCCESS
end

function slurm_bb_post_run(job_id, ...)
	return slurm.SUCCESS
end

--[[ slurm_bb_data_out (asynchronous): each stage_out, in order, waited for. ]]
function slurm_bb_data_out(job_id, job_script, ...)
	local c, problem = load_config()
	if not c then
		return fail(job_id, "stage-out", problem)
	end
	local r, bad = job_request(c, job_script)
	if not r then
		return fail(job_id, "stage-out", bad)
	end
	if #r.stage_out == 0 then
		return slurm.SUCCESS
	end
	local user = user_of_namespace(c, job_id)
	if not user then
		return fail(job_id, "stage-out", "cannot tell the job's user (its namespace's owner)")
	end
	-- Checked again: what setup allowed was for this user, and the paths it names are theirs.
	local refused = check_staging(c, r, job_id, user)
	if refused then
		return fail(job_id, "stage-out", refused)
	end
	for _, pair in ipairs(r.stage_out) do
		local dest = expand(pair[2], job_id, user)
		local why = stage(c, job_id, "out", expand(pair[1], job_id, user), outside(c, dest), r.verify)
		if why then
			return fail(job_id, "stage-out to " .. dest .. " failed", why)
		end
		log_info("JobId=%s: staged out %s to %s", job_id, pair[1], dest)
	end
	return slurm.SUCCESS
end

--[[ slurm_bb_job_teardown (asynchronous): destroys the namespace. With hurry (a cancelled job),
staging operations still running for it are cancelled first. Idempotent. The skeinctl calls run
detached: Slurm 22.05 may kill the teardown it has just started for a cancelled job (the cancel
flushes the job's scripts), and a destroy that has begun then still finishes. A teardown killed
before its destroy began leaves the namespace to the reaper below. ]]
function slurm_bb_job_teardown(job_id, job_script, hurry, ...)
	local c, problem = load_config()
	if not c then
		return fail(job_id, "teardown", problem)
	end
	local id = job_namespace_id(c, job_id)
	if hurry == "true" then
		local ok, out = skeinctl(c, "stage list " .. shq(id))
		if ok then
			for op, state in out:gmatch('"id"%s*:%s*"?([%w_.-]+)"?.-"state"%s*:%s*"(%a+)"') do
				if state == "queued" or state == "running" then
					skeinctl(c, "stage cancel " .. shq(op), true)
				end
			end
		end
	end
	local ok, _, reason = skeinctl(c, "ns destroy " .. shq(id) .. " --wait-ms " .. tostring(c.controller.destroy_wait_ms or 10000), true)
	if not ok then
		return fail(job_id, "cannot destroy the job's scratch namespace", reason)
	end
	log_info("JobId=%s: destroyed scratch namespace %s%s", job_id, id, hurry == "true" and " (hurry)" or "")
	return slurm.SUCCESS
end

-- `scontrol show bbstat`: the job namespaces of this cluster's jobs. Slurm releases after 22.05 pass
-- the caller's uid and gid first: root then gets a line a namespace (the job, its owner, what it
-- holds against its quota, the seconds left of its lifetime), any other user those of their own
-- jobs only. Slurm 22.05 (Debian 12) passes only the words after `bbstat`, so who asks is not
-- known: everyone gets how many namespaces there are and what they hold in all, and an admin the
-- rest from `skeinctl ns list`. The lines name jobs, owners and usage, which a site that keeps
-- jobs private (PrivateData) does not show to everyone.
function slurm_bb_get_status(...)
	local uid, gid = ...
	local caller = type(uid) == "number" and type(gid) == "number" and uid or nil
	local c, problem = load_config()
	if not c then
		return slurm.ERROR, problem
	end
	local list, reason = our_namespaces(c)
	if not list then
		return slurm.ERROR, reason
	end
	local function number(ns, key)
		return tonumber(ns.entry:match('"' .. key .. '"%s*:%s*(%d+)')) or 0
	end
	if not caller then
		local bytes, inodes = 0, 0
		for _, ns in ipairs(list) do
			bytes = bytes + number(ns, "bytes_used")
			inodes = inodes + number(ns, "inodes_used")
		end
		return slurm.SUCCESS, string.format("skein: %d job namespaces, %.0f bytes in %.0f inodes in all "
			.. "(a line each: skeinctl ns list)\n", #list, bytes, inodes)
	end
	local now = os.time()
	local lines = { string.format("%-12s %-8s %15s %15s %11s %12s %10s", "JOBID", "UID", "BYTES_USED",
		"QUOTA_BYTES", "INODES_USED", "QUOTA_INODES", "EXPIRES_IN") }
	for _, ns in ipairs(list) do
		if caller == 0 or number(ns, "uid") == caller then
			lines[#lines + 1] = string.format("%-12s %-8d %15.0f %15.0f %11.0f %12.0f %9.0fs", ns.job,
				number(ns, "uid"), number(ns, "bytes_used"), number(ns, "quota_bytes"),
				number(ns, "inodes_used"), number(ns, "quota_inodes"),
				math.max(0, number(ns, "expires_s") - now))
		end
	end
	return slurm.SUCCESS, table.concat(lines, "\n") .. "\n"
end

-- ---------------------------------------------------------------- run by hand

if STANDALONE then
	local usage = "usage: lua5.1 burst_buffer.lua reap [--dry-run]\n" ..
		"  destroys the job namespaces whose Slurm job no longer needs them, and renews those\n" ..
		"  whose job needs them longer than they would live (docs/slurm.md)\n"
	if arg[1] ~= "reap" or (arg[2] and arg[2] ~= "--dry-run") or arg[3] then
		io.stderr:write(usage)
		os.exit(2)
	end
	local c, problem = load_config()
	if not c then
		log_error("%s", problem)
		os.exit(2)
	end
	local count, why = reap(c, arg[2] == "--dry-run")
	if not count then
		log_error("reap: %s", why)
		os.exit(1)
	end
	os.exit(0)
end
