// Package provider is a Pulumi resource provider for tests: it manages real
// resources without a network, so the operator's end-to-end tests exercise the
// real Pulumi engine — create, update, replace, delete, refresh and drift.
//
// It offers one resource type, stackflowtest:index:Record: a file whose content
// is the record's "content", in the directory given by the provider's "dir"
// configuration (or STACKFLOW_TEST_PROVIDER_DIR). Changing "content" updates the
// file in place; changing "name" replaces it. Editing or deleting the file behind
// Pulumi's back is drift that `pulumi refresh` detects.
//
// Knobs for tests: "failOn" ("create", "update", "delete" or "always") makes that
// operation fail with a recognisable error; "sleepSeconds" makes create and update
// take that long (honouring cancellation), for concurrency and crash tests;
// "echo" (any JSON) or "echoEnv" (the name of an environment variable of the
// provider, whose value follows a string "echo") is returned as the output "echoed" and repeated in failOn's error,
// as a careless provider would, for redaction tests.
// The environment variable STACKFLOW_TEST_PROVIDER_HOLD (HoldEnv) names a file:
// while it exists, create, update and read (refresh) wait (a create or update
// failOn refuses fails at once), so a test decides when an update ends.
//
// It imports only the Pulumi SDK.
package provider
