-- Argo CD health check for pulumi.com Program (Stackflow, Pulumi Kubernetes
-- Operator v2 API): Healthy once the operator has published the artifact of
-- the current generation. See argocd-health/README.md.
--
-- It runs in Argo CD's default Lua sandbox; with
-- resource.customizations.useOpenLibs.pulumi.com_Program set (the install
-- files set it) the artifact digest is shortened.

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

-- short abbreviates "<generation>/sha256:<digest>" to 7 characters of the
-- digest.
local function short(rev)
  rev = text(rev)
  if rev == nil or rev == "" then return "(no revision)" end
  if S == nil then return rev end
  local prefix, digest = S.match(rev, "^(.*:)(%x+)$")
  if prefix ~= nil and #digest > 7 then return prefix .. S.sub(digest, 1, 7) end
  return rev
end

local meta = tbl(obj.metadata) or {}
if obj.status ~= nil and (tbl(obj.status) == nil or obj.status[1] ~= nil) then
  return {status = "Unknown", message = "The Program's status is not an object"}
end
local status = tbl(obj.status) or {}
local generation = number(meta.generation)
local observed = number(status.observedGeneration)
local artifact = tbl(status.artifact)

if meta.deletionTimestamp ~= nil then
  return {status = "Progressing", message = "Deleting"}
end
if artifact == nil then
  return {status = "Progressing", message = "Waiting for the operator to publish the program's artifact"}
end
if generation ~= nil and observed ~= generation then
  local was = "an unknown generation"
  if observed ~= nil then was = "generation " .. observed end
  return {status = "Progressing", message = "Waiting for the artifact of generation " .. generation .. " (the published one is for " .. was .. ")"}
end
return {status = "Healthy", message = "Artifact " .. short(artifact.revision) .. " published"}
