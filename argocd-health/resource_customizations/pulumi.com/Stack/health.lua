-- Argo CD health check for pulumi.com Stack (Stackflow, Pulumi Kubernetes
-- Operator v2 API). The rows below are tried in order; argocd-health/README.md
-- gives each one with its rationale.
--
-- It runs in Argo CD's default Lua sandbox (no string library). With
-- resource.customizations.useOpenLibs.pulumi.com_Stack set (the install files
-- set it) commit SHAs are shortened and the operator's messages are rearranged;
-- the status is the same either way.

local S = nil
if type(string) == "table" then S = string end

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

local function result(code, msg)
  return {status = code, message = msg}
end

local meta = tbl(obj.metadata) or {}
local spec = tbl(obj.spec) or {}
local rawStatus = obj.status
local status = tbl(rawStatus) or {}

local function condition(typ)
  local conds = tbl(status.conditions)
  if conds == nil then return nil end
  for _, c in ipairs(conds) do
    if type(c) == "table" and c.type == typ then return c end
  end
  return nil
end

local function isTrue(c)
  return c ~= nil and c.status == "True"
end

local function message(c)
  if c == nil then return "" end
  return text(c.message) or ""
end

-- labelled renders a condition as "<prefix> (<reason>): <message>".
local function labelled(prefix, c)
  local reason, msg = text(c.reason), message(c)
  local out = prefix
  if reason ~= nil and reason ~= "" then out = out .. " (" .. reason .. ")" end
  if msg ~= "" then out = out .. ": " .. msg end
  return out
end

-- short abbreviates a revision: a commit SHA to 7 characters, a digest
-- revision ("3/sha256:…" of a Program, "main@sha1:…" of Flux) to its prefix
-- and 7 characters of the digest.
local function short(rev)
  rev = text(rev)
  if rev == nil or rev == "" then return "an unknown revision" end
  if S == nil then return rev end
  if #rev > 7 and S.match(rev, "^%x+$") ~= nil then return S.sub(rev, 1, 7) end
  local prefix, digest = S.match(rev, "^(.*:)(%x+)$")
  if prefix ~= nil and #digest > 7 then return prefix .. S.sub(digest, 1, 7) end
  return rev
end

-- changes renders a change-count map ({create = 1, same = 2}) as
-- "create 1, same 2", sorted, zeros left out; nil when there is no map.
local function changes(m)
  m = tbl(m)
  if m == nil then return nil end
  local keys = {}
  for k, v in pairs(m) do
    if type(k) == "string" and number(v) ~= nil and number(v) ~= 0 then table.insert(keys, k) end
  end
  if #keys == 0 then return "none" end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do table.insert(parts, k .. " " .. text(m[k])) end
  return table.concat(parts, ", ")
end

local generation = number(meta.generation)
local annotations = tbl(meta.annotations) or {}
local deleting = meta.deletionTimestamp ~= nil
local preview = spec.preview == true
local ready = condition("Ready")
local reconciling = condition("Reconciling")
local stalled = condition("Stalled")
local drift = condition("DriftDetected")
local lastUpdate = tbl(status.lastUpdate)
local current = tbl(status.currentUpdate)
local exports = tbl(status.exports)
-- A drift check observes and changes nothing: the Stack is not progressing.
if current ~= nil and current.purpose == "drift-check" and not (meta.deletionTimestamp ~= nil) then current = nil end

-- The update type of the running update: the first word of the operator's
-- Reconciling message ("up stack-1a2b3c4d running for …"), else what the
-- operator would run.
local updateTypes = {preview = true, up = true, refresh = true, destroy = true}
local function runningType()
  if S ~= nil and isTrue(reconciling) then
    local word = S.match(message(reconciling), "^(%a+) ")
    if word ~= nil and updateTypes[word] then return word end
  end
  if deleting and reconciling ~= nil and reconciling.reason == "Deleting" then return "destroy" end
  if preview then return "preview" end
  return "up"
end

-- running describes the running update: "<type> <name> for <revision>".
local function running()
  return runningType() .. " " .. (text(current.name) or "(unnamed update)") .. " for " .. short(current.commit)
end

-- Malformed status: nothing can be concluded.
if rawStatus ~= nil and (tbl(rawStatus) == nil or rawStatus[1] ~= nil) then
  return result("Unknown", "The Stack's status is not an object")
end

-- Being deleted (finalizer.stack.pulumi.com). Argo CD itself reports
-- "Pending deletion" for objects with a deletionTimestamp unless they carry its
-- hook finalizer; these rows serve hooks and direct callers.
if deleting then
  if isTrue(stalled) and stalled.reason == "DestroyFailed" then
    return result("Degraded", "Deleting: " .. message(stalled))
  end
  -- destroyOnFinalize: the Stacks depending on this one (prerequisites,
  -- exports they read) are deleted first.
  if isTrue(reconciling) and reconciling.reason == "DependentsExist" then
    local msg = "Deleting: " .. message(reconciling)
    if current ~= nil then msg = msg .. "; meanwhile running " .. running() end
    return result("Progressing", msg)
  end
  if current ~= nil then
    local msg = "Deleting: running " .. running()
    if not (reconciling ~= nil and reconciling.reason == "Deleting") then
      if spec.destroyOnFinalize == true then
        msg = msg .. "; the destroy runs after it"
      else
        msg = msg .. "; the finalizer is removed after it"
      end
    end
    return result("Progressing", msg)
  end
  if isTrue(reconciling) and reconciling.reason == "Deleting" then
    return result("Progressing", "Deleting: " .. message(reconciling))
  end
  if spec.destroyOnFinalize == true then
    return result("Progressing", "Deleting: waiting for the operator to destroy the stack's resources")
  end
  return result("Progressing", "Deleting: waiting for the operator to remove its finalizer")
end

-- Not reconciled yet.
if ready == nil and reconciling == nil and stalled == nil and lastUpdate == nil and current == nil then
  return result("Progressing", "Waiting for the operator to reconcile the Stack")
end

-- A spec the operator has not looked at: the status describes an older one.
-- status.observedGeneration only moves on Ready or Stalled, so the conditions'
-- observedGeneration (written on every reconcile) counts too.
local seen = number(status.observedGeneration)
for _, c in ipairs(tbl(status.conditions) or {}) do
  if type(c) == "table" then
    local g = number(c.observedGeneration)
    if g ~= nil and (seen == nil or g > seen) then seen = g end
  end
end
if generation ~= nil and seen ~= nil and seen < generation then
  return result("Progressing", "Waiting for the operator to process generation " .. generation .. " (the status describes generation " .. seen .. ")")
end

-- An update is running. Retrying the update that failed stays Degraded until
-- an attempt succeeds.
if current ~= nil then
  local msg = running()
  local startedFor = number(current.generation)
  if startedFor ~= nil and generation ~= nil and startedFor < generation then
    msg = msg .. " (started for generation " .. startedFor .. "; generation " .. generation .. " runs next)"
  end
  if lastUpdate ~= nil and lastUpdate.state == "failed" and text(lastUpdate.lastAttemptedCommit) == text(current.commit)
    and number(lastUpdate.generation) == startedFor then
    local failures = number(lastUpdate.failures) or 1
    local attempts = failures .. " failed attempts"
    if failures == 1 then attempts = "1 failed attempt" end
    return result("Degraded", "Retrying after " .. attempts .. ": running " .. msg .. "; last error: " .. (text(lastUpdate.message) or "unknown"))
  end
  return result("Progressing", "Running " .. msg)
end

-- Waiting for a prerequisite Stack.
if isTrue(reconciling) and reconciling.reason == "PrerequisiteNotSatisfied" then
  local msg = message(reconciling)
  local name = nil
  if S ~= nil then name = S.match(msg, "^prerequisite ([%w%.%-]+)") end
  local prereqs = tbl(spec.prerequisites)
  if name == nil and prereqs ~= nil and #prereqs == 1 and tbl(prereqs[1]) ~= nil then
    name = text(prereqs[1].name)
  end
  if name == nil then
    return result("Progressing", "Waiting for a prerequisite: " .. msg)
  end
  return result("Progressing", "Waiting for prerequisite " .. name .. ": " .. msg)
end

-- A reconciliation request the operator has not acted on. A request re-runs
-- a Stack stalled by failed or conflicting updates; other stalls need a fix
-- and are reported as such.
local request = text(annotations["pulumi.com/reconciliation-request"])
local requestRuns = {UpdateFailed = true, UpdateConflict = true, ExportFailed = true}
if request ~= nil and request ~= "" and request ~= text(status.observedReconcileRequest)
  and (lastUpdate == nil or request ~= text(lastUpdate.reconcileRequest))
  and not (isTrue(stalled) and not requestRuns[text(stalled.reason) or ""]) then
  return result("Progressing", "Waiting for the operator to act on reconciliation request " .. request)
end

if isTrue(stalled) then
  -- Up to date, but the outputs of the last update were refused
  -- (spec.exports): what reads them reads an older update's values.
  if stalled.reason == "ExportFailed" then
    local reason = nil
    if exports ~= nil then reason = text(exports.reason) end
    local out = "Export failed"
    if reason ~= nil and reason ~= "" then out = out .. " (" .. reason .. ")" end
    return result("Degraded", out .. ": " .. message(stalled))
  end
  -- The operator's message starts "dependency cycle: ".
  if stalled.reason == "DependencyCycle" and S ~= nil then
    local rest = S.match(message(stalled), "^dependency cycle: (.*)$")
    if rest ~= nil then return result("Degraded", "Dependency cycle: " .. rest) end
  end
  return result("Degraded", labelled("Stalled", stalled))
end

-- The last update failed and is retried after a backoff: Degraded, so the
-- failure shows and sync waves stop, with the attempt and the next retry.
if isTrue(reconciling) and reconciling.reason == "RetryingAfterFailure" then
  local msg = message(reconciling)
  if lastUpdate == nil or lastUpdate.state ~= "failed" then
    -- A conflicting update is retried without counting as a failure.
    return result("Progressing", "Retrying: " .. msg)
  end
  local at = text(lastUpdate.lastResyncTime)
  if S ~= nil then
    local attempt = S.match(msg, "%(attempt (%d+ of %d+)%)")
    local wait = S.match(msg, "; retrying in ([%w%.]+)$")
    if attempt ~= nil and wait ~= nil then
      local when = "in " .. wait
      if at ~= nil then when = wait .. " after " .. at end
      return result("Degraded", "Update failed (attempt " .. attempt .. "), retrying " .. when .. ": " .. (text(lastUpdate.message) or "unknown error"))
    end
  end
  if at ~= nil then msg = msg .. " (failed at " .. at .. ")" end
  return result("Degraded", "Update failed, retrying: " .. msg)
end

if isTrue(reconciling) then
  local known = {StackProcessing = true}
  if known[text(reconciling.reason) or ""] then
    return result("Progressing", message(reconciling))
  end
  return result("Progressing", labelled("Reconciling", reconciling))
end

-- Drift found by a drift check (spec.driftDetection): the infrastructure
-- differs from the last successful update.
if isTrue(drift) then
  if drift.reason == "DriftDetected" then
    return result("Degraded", "Drift detected: " .. message(drift))
  end
  return result("Degraded", labelled("Drift detected", drift))
end

-- A plan waiting for a person (spec.approval): Suspended, as Argo CD shows
-- anything paused for a decision, with the plan's summary and fingerprint.
if ready ~= nil and ready.status == "False" and ready.reason == "AwaitingApproval" then
  return result("Suspended", message(ready))
end

if isTrue(ready) then
  if lastUpdate == nil then
    return result("Healthy", message(ready))
  end
  local typ = text(lastUpdate.type) or "up"
  if preview or typ == "preview" then
    local msg = "Preview mode: preview of " .. short(lastUpdate.lastAttemptedCommit) .. " succeeded, nothing deployed"
    local counts = changes(lastUpdate.changes)
    if counts ~= nil then
      msg = msg .. "; changes: " .. counts
    elseif text(lastUpdate.name) ~= nil then
      msg = msg .. "; change counts are not in Stack status (see Update " .. text(lastUpdate.name) .. ")"
    else
      msg = msg .. "; change counts are not in Stack status"
    end
    return result("Healthy", msg)
  end
  local rev = text(lastUpdate.lastSuccessfulCommit)
  if rev == nil or rev == "" then rev = text(lastUpdate.lastAttemptedCommit) end
  local msg = "Last " .. typ .. " succeeded at " .. short(rev)
  -- spec.exports: the objects holding this update's outputs.
  if exports ~= nil and (text(exports.reason) or "") == "" and text(exports.update) ~= nil
    and text(exports.update) == text(lastUpdate.name) then
    local objs = {}
    local cm, sec = tbl(exports.configMap), tbl(exports.secret)
    if cm ~= nil and text(cm.name) ~= nil then table.insert(objs, "ConfigMap " .. text(cm.name)) end
    if sec ~= nil and text(sec.name) ~= nil then table.insert(objs, "Secret " .. text(sec.name)) end
    if #objs > 0 then msg = msg .. "; outputs exported to " .. table.concat(objs, " and ") end
  end
  return result("Healthy", msg)
end

if ready ~= nil then
  return result("Progressing", labelled("Not ready", ready))
end
return result("Progressing", "Waiting for the operator to report the Stack's conditions")
