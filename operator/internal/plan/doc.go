// Package plan holds what Stackflow knows of a Pulumi update plan (the JSON
// file `pulumi preview --save-plan` writes and `pulumi up --plan` is
// constrained to): its parse, bounded in size; its fingerprint, the identity
// an approval approves; and its summary for status (operation counts and the
// affected resources).
//
// A fingerprint identifies a change, not a run: the parts of a plan that
// differ between two previews of the same change (the manifest's time, the
// per-resource random seeds, the nonces of encrypted secret values) are left
// out, so two commits that yield the same change yield the same fingerprint.
// A secret value enters it by presence only (its ciphertext differs on every
// preview); the keyed digest of the Stack's referenced inputs is mixed in, so
// a rotated Secret or ConfigMap value is a new change all the same.
//
// It imports the standard library only.
package plan
