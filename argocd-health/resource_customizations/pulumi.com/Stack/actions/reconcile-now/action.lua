-- Asks the operator to reconcile the Stack now: a new value of the
-- pulumi.com/reconciliation-request annotation runs an update (of the current
-- revision, even when nothing changed) and is echoed in
-- status.observedReconcileRequest once handled. A Stack being deleted is
-- returned unchanged (an empty patch): the operator ignores requests then.

if obj.metadata.deletionTimestamp ~= nil then return obj end

local key = "pulumi.com/reconciliation-request"
if type(obj.metadata.annotations) ~= "table" then obj.metadata.annotations = {} end
-- Argo CD's Lua sandbox offers a safe os module with date and time only, by
-- require("os") (there is no global os); one-second resolution, so a second
-- request within the same second gets a suffix.
local value = require("os").date("!%Y-%m-%dT%H:%M:%SZ")
if obj.metadata.annotations[key] == value then value = value .. "-1" end
obj.metadata.annotations[key] = value
return obj
