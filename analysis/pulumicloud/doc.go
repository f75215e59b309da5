// Package pulumicloud answers verifications ("did stack org/project/stack
// apply, or preview, commit Y?") for stacks run outside the cluster (by CI
// or another operator) from the Pulumi Cloud REST API. The HTTP server
// calls Client.Verify for GET /v1/pulumi/{org}/{project}/{stack}/verification
// and ValidName to refuse malformed path segments with a 400.
//
// It imports the standard library and analysis/verification only (its
// tests also import analysis/pulumicloud/cloudtest). It never returns an
// error for Pulumi Cloud trouble: every answer is a verification.Result.
//
// # What it relies on in the REST API
//
// From https://www.pulumi.com/docs/reference/cloud-rest-api/ (API basics,
// Stack Updates, and the schema pages AppUpdateInfo, UpdateInfo and
// GetStackUpdatesResponse):
//
//   - Every request sends "Authorization: token <token>",
//     "Accept: application/vnd.pulumi+8" and "Content-Type: application/json".
//     The API answers 401 when the token is missing or invalid.
//   - operation=up reads List Stack Updates,
//     GET /api/stacks/{organization}/{project}/{stack}/updates?output-type=service&pageSize=N&page=1
//     (page 1 is the most recent; the service output type returns
//     GetStackUpdatesResponse: {"updates": [UpdateInfo…], "itemsPerPage", "total"}).
//   - operation=preview reads List Previews,
//     GET /api/stacks/{organization}/{project}/{stack}/updates/latest/previews?asc=false&pageSize=N&page=1
//     ("all previews since the last update operation"; same response
//     shape; asc, page and pageSize are in the API's OpenAPI description).
//     The documented update list is the stack's history (its example holds
//     updates only) and previews have this route of their own; the client
//     filters by kind on both lists anyway, so an up never answers for a
//     preview nor the reverse whatever a list holds. Previews run before
//     the stack's latest update are not in this list: a preview
//     verification of a commit previewed before a later update answers
//     Pending.
//   - Get Latest Update (updates/latest) is not used: it returns one
//     update of any kind, which the first page of the list already holds.
//   - Of an UpdateInfo it reads updateID, version and info; of info
//     (AppUpdateInfo) it reads kind (update, preview, Pupdate, refresh,
//     destroy…), result (not-started, in-progress, succeeded, failed),
//     startTime and endTime (unix seconds, endTime 0 while running),
//     version, resourceChanges (operation → count) and, of environment,
//     the single key "git.head" (the commit the CLI ran at). It reads no
//     other environment key, and never config, deployment, requestedBy or
//     requestedByToken: those are decoded into nothing.
//   - Error bodies are {"code": N, "message": "…"}; only the status code
//     is used (the message is not copied into answers).
//   - The console permalink of an update is
//     https://app.pulumi.com/{org}/{project}/{stack}/updates/{version}, the
//     form the documented stack_update webhook payload's updateUrl takes.
//     The API returns no permalink, so it is built only for kind update and
//     only when the console URL is known (Options.ConsoleURL, defaulted for
//     the managed service's BaseURL).
//
// # The answer
//
// Of the listed operations of the requested kind (up: kind update;
// preview: kind preview or Pupdate — never one for the other) whose
// git.head matches the requested commit (verification.Matches: a prefix,
// so abbreviated commits work), the newest decides — the highest version
// for updates; for previews, which share the version they ran against, the
// latest startTime — so a failure followed by a newer run of the same
// commit answers as that run: succeeded is Succeeded (Pending
// SucceededOutsideWindow when Within is set and endTime is older),
// not-started and in-progress are Running, failed is Failed
// (UpdateFailed). None for the commit is Pending AwaitingUpdate, naming the
// latest one's commit. A result the API does not document is Pending
// CloudUnavailable. 429, 5xx, other unexpected statuses, network errors and
// undecodable answers are Pending CloudUnavailable (never Failed); 401 and
// 403, and a token that cannot be read, are Pending CloudUnauthorized; 404
// is Pending StackNotFound. Update.Name is the version for an update and
// the updateID for a preview.
//
// Answers are cached per stack and route for Options.CacheTTL (errors too,
// and a 429 for as long as its Retry-After asks, at most five minutes), in a
// bounded cache, with one request in flight per stack and route.
package pulumicloud
