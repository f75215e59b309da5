// Package githubtest is a local, in-memory GitHub REST server (on
// net/http/httptest) implementing exactly the routes package githubapi
// calls, faithfully enough to test it: tokens and the users they
// authenticate as, issue comments with real pagination (per_page, page and
// a Link header with next/last/prev/first), comment edits and deletes,
// commit statuses (422 for a description over 140 characters or a context
// over 255), a read-only token (403 "Resource not accessible by
// integration" on writes, as a fork PR's token gets), GitHub App
// installation tokens such as the workflow's GITHUB_TOKEN (GET /user
// answers 403, comments are by a bot), the 65,536-character body limit
// (422), injectable latency to provoke races,
// and both the github.com layout (/...) and GitHub Enterprise Server's
// (/api/v3/...).
//
// Tests inspect and seed its state through methods; it is safe for
// concurrent use.
//
// It imports only the standard library.
package githubtest
