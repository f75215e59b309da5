// Package inputs holds the action's configuration: its inputs, read from
// INPUT_<NAME> environment variables as the Actions runner sets them, and
// the runner's standard variables (GITHUB_EVENT_PATH, GITHUB_REPOSITORY,
// GITHUB_API_URL, …), validated with messages that name the input to fix.
// The list of inputs here is the one action.yml and the README document; a
// test cross-checks the three.
//
// It also keeps the action's secrets from child processes
// (ScrubEnvironment, ChildEnviron): the inputs, tokens included, arrive as
// INPUT_* variables, which every child would otherwise inherit.
//
// It imports the standard library only.
package inputs
