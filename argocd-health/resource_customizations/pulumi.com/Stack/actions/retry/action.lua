-- Retries a Stack whose update failed now, without waiting for the backoff
-- (RetryingAfterFailure), or one that met another run's lock
-- (RetryingAfterConflict), or after the operator gave up (Stalled): a new
-- pulumi.com/reconciliation-request value runs the update again. Argo CD does
-- not check that an action is enabled, so on any other Stack this returns it
-- unchanged (an empty patch).

local function tbl(v)
  if type(v) == "table" then return v end
  return nil
end

local function isTrue(typ, reason)
  for _, c in ipairs(tbl(tbl(obj.status) and obj.status.conditions) or {}) do
    if type(c) == "table" and c.type == typ then
      return c.status == "True" and (reason == nil or c.reason == reason)
    end
  end
  return false
end

if obj.metadata.deletionTimestamp ~= nil then return obj end
if not (isTrue("Stalled", nil) or isTrue("Reconciling", "RetryingAfterFailure") or isTrue("Reconciling", "RetryingAfterConflict")) then return obj end

local key = "pulumi.com/reconciliation-request"
if type(obj.metadata.annotations) ~= "table" then obj.metadata.annotations = {} end
local value = require("os").date("!%Y-%m-%dT%H:%M:%SZ")
if obj.metadata.annotations[key] == value then value = value .. "-1" end
obj.metadata.annotations[key] = value
return obj
