-- Takes the Stack out of preview mode (spec.preview: false): the new
-- generation deploys at once. With automated sync and selfHeal, Argo CD
-- reverts this to the spec in git. Argo CD does not check that an action is
-- enabled: a Stack not in preview mode, or being deleted, is returned
-- unchanged (an empty patch; writing preview: false would bump the generation
-- and run an update).

if obj.metadata.deletionTimestamp ~= nil then return obj end
if type(obj.spec) == "table" and obj.spec.preview == true then
  obj.spec.preview = false
end
return obj
