-- Argo CD health check for auto.pulumi.com Update (Stackflow, Pulumi
-- Kubernetes Operator v2 API): Healthy when the operation succeeded, Degraded
-- with the reason and message when it failed, Progressing until it ends. See
-- argocd-health/README.md. Needs no standard library.

local function tbl(v)
  if type(v) == "table" then return v end
  return nil
end

local function text(v)
  if type(v) == "string" then return v end
  if type(v) == "number" or type(v) == "boolean" then return tostring(v) end
  return nil
end

local function number(v)
  if type(v) == "number" then return v end
  if type(v) == "string" then return tonumber(v) end
  return nil
end

-- changes renders {create = 1, same = 2} as "create 1, same 2", sorted,
-- zeros left out.
local function changes(m)
  m = tbl(m)
  if m == nil then return nil end
  local keys = {}
  for k, v in pairs(m) do
    if type(k) == "string" and number(v) ~= nil and number(v) ~= 0 then table.insert(keys, k) end
  end
  if #keys == 0 then return "no changes" end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do table.insert(parts, k .. " " .. text(m[k])) end
  return table.concat(parts, ", ")
end

local meta = tbl(obj.metadata) or {}
local spec = tbl(obj.spec) or {}
if obj.status ~= nil and (tbl(obj.status) == nil or obj.status[1] ~= nil) then
  return {status = "Unknown", message = "The Update's status is not an object"}
end
local status = tbl(obj.status) or {}

local function condition(typ)
  for _, c in ipairs(tbl(status.conditions) or {}) do
    if type(c) == "table" and c.type == typ then return c end
  end
  return nil
end

local typ = text(spec.type) or "update"
local Typ = ({preview = "Preview", up = "Up", refresh = "Refresh", destroy = "Destroy"})[typ] or "Update"
local complete = condition("Complete")
local failed = condition("Failed")
local progressing = condition("Progressing")
local failureReasons = {UpdateFailed = true, UpdateConflict = true, StackNotFound = true, Aborted = true, Canceled = true}

if complete ~= nil and complete.status == "True" then
  local isFailed = failed ~= nil and failed.status == "True"
  if failed == nil then isFailed = failureReasons[text(complete.reason) or ""] == true end
  if isFailed then
    local c = failed or complete
    local reason = text(c.reason) or "Failed"
    local msg = text(status.message)
    if msg == nil or msg == "" then msg = text(c.message) or "" end
    return {status = "Degraded", message = Typ .. " failed (" .. reason .. "): " .. msg}
  end
  local msg = Typ .. " succeeded"
  local counts = changes(status.changes)
  if counts ~= nil then msg = msg .. ": " .. counts end
  return {status = "Healthy", message = msg}
end
if progressing ~= nil and progressing.status == "True" then
  local msg = Typ .. " running"
  local started = text(status.startTime)
  if started ~= nil and started ~= "" then msg = msg .. " since " .. started end
  return {status = "Progressing", message = msg}
end
if meta.deletionTimestamp ~= nil then
  return {status = "Progressing", message = "Deleting"}
end
local c = progressing or complete
if c ~= nil and text(c.message) ~= nil and text(c.message) ~= "" then
  return {status = "Progressing", message = "Waiting to start the " .. typ .. ": " .. text(c.message)}
end
return {status = "Progressing", message = "Waiting for the operator to start the " .. typ}
