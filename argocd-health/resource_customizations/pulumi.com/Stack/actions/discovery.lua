-- Argo CD resource actions for pulumi.com Stack: which are offered, and which
-- are enabled now. See argocd-health/README.md.

local function tbl(v)
  if type(v) == "table" then return v end
  return nil
end

local meta = tbl(obj.metadata) or {}
local spec = tbl(obj.spec) or {}
local status = tbl(obj.status) or {}

local function isTrue(typ, reason)
  for _, c in ipairs(tbl(status.conditions) or {}) do
    if type(c) == "table" and c.type == typ then
      return c.status == "True" and (reason == nil or c.reason == reason)
    end
  end
  return false
end

-- While a Stack is deleted the operator only destroys and removes its
-- finalizer: requests and spec changes would do nothing.
local deleting = meta.deletionTimestamp ~= nil
local failing = isTrue("Stalled", nil) or isTrue("Reconciling", "RetryingAfterFailure") or isTrue("Reconciling", "RetryingAfterConflict")
local preview = spec.preview == true
-- A plan awaiting approval (spec.approval.required) can be approved or
-- rejected; the menu names its summary (no string library here to shorten
-- the fingerprint; the health message shows it).
local plan = tbl(status.plan) or {}
local awaiting = plan.state == "AwaitingApproval" and type(plan.fingerprint) == "string" and plan.fingerprint ~= ""
local summary = ""
if awaiting and type(plan.summary) == "string" then summary = " " .. plan.summary end

local actions = {}
actions["reconcile-now"] = {displayName = "Reconcile now", iconClass = "fa fa-fw fa-sync", disabled = deleting}
actions["retry"] = {displayName = "Retry the failed update now", iconClass = "fa fa-fw fa-redo", disabled = deleting or not failing}
actions["preview-on"] = {displayName = "Preview mode on", iconClass = "fa fa-fw fa-eye", disabled = deleting or preview}
actions["preview-off"] = {displayName = "Preview mode off (deploy)", iconClass = "fa fa-fw fa-play", disabled = deleting or not preview}
actions["approve"] = {displayName = "Approve plan" .. summary, iconClass = "fa fa-fw fa-check", disabled = deleting or not awaiting}
actions["reject"] = {displayName = "Reject plan" .. summary, iconClass = "fa fa-fw fa-times", disabled = deleting or not awaiting}
return actions
