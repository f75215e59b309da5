// Package preview runs `pulumi preview` for a set of stacks, concurrently,
// through the Pulumi Automation API and the pulumi CLI, and reports each
// stack's preview as a result.Result.
//
// A Request names a project directory and a stack, with the configuration,
// environment and notes of that preview. Run previews the requests (at most
// `parallel` at once) and returns the results in request order; one preview
// failing never stops the others.
//
// Decisions worth knowing:
//
//   - Backend: the pulumi CLI reads PULUMI_BACKEND_URL, PULUMI_ACCESS_TOKEN
//     and PULUMI_CONFIG_PASSPHRASE from the environment (the action's), and
//     Request.Env and Request.Backend override them per request.
//   - A stack that does not exist in the backend is created for the preview
//     (which then shows everything as create), removed again afterwards, and
//     the result carries a Note saying so: the useful answer for a pull
//     request that adds a stack, which the operator creates on first update.
//   - Requests for the same stack of the same directory run one after the
//     other (they share its settings file); others run in parallel (the
//     CLI's workspace file, which records the selected stack, is written
//     atomically, and every command names its stack explicitly).
//   - Configuration is written to the stack's settings file in the project
//     directory (Pulumi.<stack>.yaml) with `pulumi config set-all --json`,
//     which keeps typed values (numbers, booleans, objects, arrays) typed;
//     keys are never property paths.
//   - Secret configuration values (and Request.Masks) are given to
//     Options.Mask before the previews start and replaced by "[secret]" in
//     the result's Output and Error; so are the stack's own secrets (its
//     settings file's "secure:" values, its environments'), read with
//     `pulumi config --show-secrets` just before its preview.
//   - Every pulumi process inherits this process's environment (the
//     Automation API passes os.Environ on): the caller removes what the
//     program must not see first (inputs.ScrubEnvironment).
//   - Changes are the engine's change summary (replacements counted once, as
//     "replace"; the stack resource pulumi:pulumi:Stack counts like any
//     other, as the CLI's summary does); Resources are the engine's resource
//     steps other than same and refresh, one per URN (a replacement's
//     create-replacement and delete-replaced steps fold into its replace).
//   - Output is the CLI's preview output with the property-level diff
//     (pulumi preview --diff: each changed property's old and new value,
//     secrets shown as [secret] by the engine); Options.NoDiff leaves it out.
//   - Options.Timeout bounds each preview (the preview-timeout input): a
//     preview still running then is stopped (the Automation API interrupts
//     the CLI's process group, then kills it) and its result is Failed,
//     saying which input to raise; the others go on.
//   - A Request with Skip set runs nothing and gives a Skipped (not
//     previewed) result; one
//     with Err set gives a Failed result: planners (the manifests mode) hand
//     every stack to Run, so all results come out in one list, in order.
package preview
