-- Puts the Stack in preview mode (spec.preview: true): it runs previews only
-- and changes no infrastructure. With automated sync and selfHeal, Argo CD
-- reverts this to the spec in git. Argo CD does not check that an action is
-- enabled: a Stack being deleted is returned unchanged (an empty patch).

if obj.metadata.deletionTimestamp ~= nil then return obj end
if type(obj.spec) ~= "table" then obj.spec = {} end
obj.spec.preview = true
return obj
