-- Argo CD health check for auto.pulumi.com Workspace (Stackflow, Pulumi
-- Kubernetes Operator v2 API): Healthy when its agent is ready for the current
-- generation, Degraded when Stalled. See argocd-health/README.md. Needs no
-- standard library.

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

local meta = tbl(obj.metadata) or {}
if obj.status ~= nil and (tbl(obj.status) == nil or obj.status[1] ~= nil) then
  return {status = "Unknown", message = "The Workspace's status is not an object"}
end
local status = tbl(obj.status) or {}

local function condition(typ)
  for _, c in ipairs(tbl(status.conditions) or {}) do
    if type(c) == "table" and c.type == typ then return c end
  end
  return nil
end

local function labelled(prefix, c)
  local out = prefix
  local reason, msg = text(c.reason), text(c.message)
  if reason ~= nil and reason ~= "" then out = out .. " (" .. reason .. ")" end
  if msg ~= nil and msg ~= "" then out = out .. ": " .. msg end
  return out
end

local ready = condition("Ready")
local stalled = condition("Stalled")
local generation = number(meta.generation)
local observed = number(status.observedGeneration)

if meta.deletionTimestamp ~= nil then
  return {status = "Progressing", message = "Deleting"}
end
-- A condition counts only for the generation it observed: its own
-- observedGeneration, else the status's. A Workspace stalled on a spec that
-- has since been replaced is not Degraded at the new generation (the operator
-- has not tried it yet).
local function current(c)
  if generation == nil then return true end
  local g = number(c.observedGeneration)
  if g == nil then g = observed end
  return g == nil or g >= generation
end

if stalled ~= nil and stalled.status == "True" and current(stalled) then
  return {status = "Degraded", message = labelled("Stalled", stalled)}
end
if generation ~= nil and observed ~= nil and observed < generation then
  return {status = "Progressing", message = "Waiting for the operator to apply generation " .. generation .. " (the status describes generation " .. observed .. ")"}
end
if ready ~= nil and ready.status == "True" then
  local address = text(status.address)
  if address == nil or address == "" then
    return {status = "Healthy", message = text(ready.message) or "Ready"}
  end
  local msg = "Agent ready at " .. address
  local version = text(status.pulumiVersion)
  if version ~= nil and version ~= "" then msg = msg .. " (pulumi " .. version .. ")" end
  return {status = "Healthy", message = msg}
end
if ready ~= nil then
  return {status = "Progressing", message = labelled("Not ready", ready)}
end
return {status = "Progressing", message = "Waiting for the operator to start the workspace"}
