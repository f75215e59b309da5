// Package manifests is the GitHub Action's manifests mode: a pull request
// that changes Stack manifests (most often advancing a Stack's spec.commit, a
// promotion) gets a preview of what each changed Stack would deploy, before
// the merge hands it to the operator.
//
//   - Load reads the Stacks, ConfigMaps and Programs of a manifests
//     directory at one commit (every YAML document of every .yaml, .yml and
//     .json file, multi-document files included), with the git CLI, fetching
//     the commit when a shallow checkout lacks it.
//   - Changed (Load twice, then Diff) finds the Stacks a pull request adds,
//     removes, or changes: their program source, stack, configuration,
//     configRef references, or the values of the ConfigMap keys and the
//     Programs they reference.
//   - Plan turns a Change into a preview.Request: the program repository
//     cloned at the Stack's new commit, the Stack's configuration applied,
//     and a Note for each input CI cannot resolve (Secrets, the operator's
//     files and variables, Flux sources), never silently dropped.
//   - Every field of a manifest is the pull request author's: before
//     anything runs, Plan refuses (refuse.go) a projectRepo other than
//     https, a commit that is not a SHA, a branch that is not a branch name,
//     a name that is not a Kubernetes name, a backend the workflow did not
//     allow and variables that steer the CLI or git; it sends the git token
//     only to the hosts the workflow lists.
//   - ReadOwners inventories a commit (the pull request's base): which
//     directory holds which Pulumi project, which file which Stack. A Stack
//     the pull request adds under a key another job owns there is refused
//     (checkOwner); program mode uses the inventory for its keys too.
//   - Every git command runs through package gitcli, bounded by the
//     git-timeout input; EnsureCommit fetches a commit a shallow checkout
//     lacks, with the workflow's token when origin is on its host.
//
// Keys are "<namespace>/<name>"; a manifest without a namespace is keyed by
// its name alone, and its references resolve among the manifests without a
// namespace.
package manifests
