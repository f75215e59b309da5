// Package rbac tests the operator's least privilege: it runs the operator in
// this process as its own ServiceAccount, bound to the generated ClusterRole
// (operator/config/rbac/role.yaml) and the leader election Role
// (operator/config/manager/role_binding.yaml) and nothing else, through a
// Stack's whole lifecycle, counting the API server's 403 answers (on a control
// plane running OwnerReferencesPermissionEnforcement, so the finalizers verbs
// are exercised too); and it
// checks that every verb those roles grant is justified by a code path
// (justification_test.go), and every justified verb granted.
//
// It imports the operator assembly, the test substrate and the API types.
package rbac
