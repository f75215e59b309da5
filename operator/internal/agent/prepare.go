package agent

import (
	"errors"
	"strings"
)

// Reasons the agent gives for failing to prepare the workspace. They begin
// its termination message ("SourceUnavailable: commit … not found in …") and
// are the Workspace condition reasons of the same name, which the runtimes
// report.
const (
	// ReasonSourceUnavailable: the program source is missing or refused — a
	// commit, branch or repository not found, authentication refused, an
	// artifact not found or not matching its digest, no Pulumi.yaml where the
	// program should be. Retrying does not help until the source or the spec
	// changes.
	ReasonSourceUnavailable = "SourceUnavailable"
	// ReasonInstallationFailed: the program was fetched but `pulumi install`
	// (or opening the Pulumi project) failed.
	ReasonInstallationFailed = "InstallationFailed"
)

// PrepareError is a classified failure to prepare the workspace.
type PrepareError struct {
	// Reason is ReasonSourceUnavailable or ReasonInstallationFailed.
	Reason string
	Err    error
}

func (e *PrepareError) Error() string { return e.Err.Error() }
func (e *PrepareError) Unwrap() error { return e.Err }

// sourceUnavailable classifies err as a missing or refused source.
func sourceUnavailable(err error) error {
	return &PrepareError{Reason: ReasonSourceUnavailable, Err: err}
}

// FailureReason is the classification of an error from Fetch, New or Serve:
// a Reason* constant, or "" when the failure may be transient (a network
// error, for instance).
func FailureReason(err error) string {
	var pe *PrepareError
	if errors.As(err, &pe) {
		return pe.Reason
	}
	return ""
}

// TerminationMessage is the one line the agent leaves for the runtime when it
// stops with err: "<Reason>: <message>" for a classified failure, the message
// alone otherwise. Newlines are folded, since readers take the last line.
func TerminationMessage(err error) string {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	if r := FailureReason(err); r != "" {
		return r + ": " + msg
	}
	return msg
}

// installationFailed classifies err as a failure to install the program.
func installationFailed(err error) error {
	return &PrepareError{Reason: ReasonInstallationFailed, Err: err}
}
