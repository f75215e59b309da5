-- Approves the update plan a Stack awaits approval for (spec.approval.required,
-- status.plan.state AwaitingApproval): creates a PlanApproval (stackflow.io)
-- of that plan's fingerprint in the Stack's namespace. Argo CD's API server
-- creates it with its own Kubernetes identity, which the admission policy
-- stackflow-plan-approval requires spec.approver to be; Argo CD records the
-- person who ran the action (an event, reason ResourceActionRan, on the
-- Application). See argocd-health/README.md, "Approving a plan".
--
-- The optional action parameter `fingerprint` (the UI offers the plan shown
-- as its default) must be the plan's: an approval never lands on a plan that
-- replaced the one the person looked at. Actions run without Lua's string
-- library, hence no string functions here.

-- ARGOCD_IDENTITY: the Kubernetes user Argo CD's API server runs as. Argo CD's
-- own manifests run it as the ServiceAccount argocd-server in the namespace
-- argocd; where it runs elsewhere, change this value (the admission policy's
-- refusal names the user it saw).
local ARGOCD_IDENTITY = "system:serviceaccount:argocd:argocd-server"
local DECISION = "Approved"

local function tbl(v)
  if type(v) == "table" then return v end
  return nil
end

if obj.metadata.deletionTimestamp ~= nil then
  error("the Stack is being deleted: there is no plan to approve", 0)
end
local plan = tbl(tbl(obj.status) and obj.status.plan) or {}
if plan.state ~= "AwaitingApproval" or type(plan.fingerprint) ~= "string" or plan.fingerprint == "" then
  error("the Stack awaits no approval (status.plan.state is " .. tostring(plan.state) .. "): nothing to approve", 0)
end
local wanted = tbl(actionParams) and actionParams.fingerprint
if wanted ~= nil and wanted ~= "" and wanted ~= plan.fingerprint then
  error("the Stack's plan changed since it was shown: it is now " .. plan.fingerprint .. " (" .. tostring(plan.summary) .. "), not " .. tostring(wanted) .. "; look at the new plan and run the action again", 0)
end

local approval = {
  apiVersion = "stackflow.io/v1alpha1",
  kind = "PlanApproval",
  metadata = {
    name = "argocd-approve-" .. plan.fingerprint,
    namespace = obj.metadata.namespace,
    labels = {["app.kubernetes.io/managed-by"] = "argocd-action"}
  },
  spec = {
    stackName = obj.metadata.name,
    fingerprint = plan.fingerprint,
    decision = DECISION,
    approver = ARGOCD_IDENTITY,
    comment = "approved through Argo CD's approve action: the Application's events (reason ResourceActionRan) name the Argo CD user"
  }
}
return {{operation = "create", resource = approval}}
