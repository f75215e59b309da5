// Package gitcli runs the git CLI for the GitHub Action with every command
// bounded in time: a git server that accepts a connection and never answers
// fails that command with a TimeoutError (naming the git-timeout input), and
// leaves no git process behind holding the connection.
//
// It imports the standard library only.
package gitcli
