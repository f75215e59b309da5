// Package fakegithub is a faithful local GitHub for tests: one Server, on a
// loopback port, serving GitHub's REST API as docs.github.com/rest documents
// it, for every client of GitHub in the repository:
//
//   - a GitHub App's installation tokens (Options.AppID; app.go): "Create an
//     installation access token for an app" verifies the JWT's RS256
//     signature with the App's public key, its claims (iss the App ID, iat in
//     the past, exp at most 10 minutes ahead and not passed), the documented
//     headers and the installation ID, and answers 201 with a token and its
//     expiry, or GitHub-shaped errors. The token then authenticates the API
//     and git as the App's bot; Calls counts exchanges and Valid/Authorize
//     tell which tokens it issued, so a git server can accept only those
//     (the operator's githubApp credentials);
//   - issue comments and commit statuses (comments.go), as the GitHub
//     Action's client uses them;
//   - a GitHub Enterprise Server's git hosting and pull request API
//     (Options.GitRoot; pulls.go), as Kargo's git-open-pr and
//     git-wait-for-pr steps use them.
//
// Every API request needs a known, unexpired token (Authorization Bearer or
// token, or a basic-auth password), else 401 "Bad credentials"; a read-only
// token (AddToken/AddAppToken with readOnly) gets 403 "Resource not
// accessible by integration" on writes, as a fork PR's token does; an
// installation token is refused GET /user (403), as GitHub refuses it.
// Unknown routes answer 404 with GitHub's JSON error body. The API is
// served in github.com's layout at the root and in GitHub Enterprise
// Server's under /api/v3 — only there when the server hosts git, whose
// paths then take the root as on GHES. Options.TLS serves HTTPS with a
// certificate of a test authority (CAPEM), as the operator accepts no other
// API URL; plain HTTP otherwise.
//
// Tests seed and inspect its state through methods (AddToken, Seed,
// Comments, Statuses, Pulls, Merge, Requests, …); it is safe for concurrent
// use. It imports the standard library, golang-jwt and test/framework/gitrepo.
package fakegithub
