// Package framework is the test harness: reusable starters and fakes that
// test suites, packages' own tests and the developer tools import, apart from
// the suites themselves (as Cluster API's test/framework is). Each starts a
// real part on loopback, or plays what cannot run here by its documented
// contract:
//
//   - substrate: the built kube-apiserver and etcd (envtest), the Pulumi CLI
//     with a file:// backend, paths of the substrate cache, and the process
//     helpers every starter uses (ChildProcAttr, PrefixWriter, Tail,
//     FreePorts, Eventually);
//   - gitrepo: real git repositories, served over smart HTTP and SSH;
//   - provider (with cmd/pulumi-resource-stackflowtest): the test Pulumi
//     provider;
//   - fakegithub: one local GitHub (App installation tokens, issue comments,
//     commit statuses, GHES git hosting and pull requests);
//   - hostproxy: a loopback HTTP proxy routing names to local servers;
//   - leaks: the one rule for finding a planted secret in what was written;
//   - argocd, rollouts, kargo: the real Argo CD, Argo Rollouts' controller
//     and Kargo (with examples/kargo's pipeline) as processes;
//   - cluster (with netprobe/cmd/stackflow-netprobe): a single-node cluster
//     from real components;
//   - browser: headless Chromium (Debian's) driven with chromedp, to look at
//     a page (Argo CD's UI) as a person does.
//
// What lives here is a library: its own tests check the harness itself
// (that the control plane is the built one, that the fake refuses what
// GitHub refuses, that Kargo as started promotes through a pull request).
// Tests of the product live with their package or in a suite under
// operator/test (admission, install, rbac, secrets, e2e, argocde2e,
// kargoe2e, verification, clustere2e). The operator run in a test process
// is operator/internal/operator/operatortest: Go lets only code under
// operator/ import the operator's internal packages.
//
// The framework imports no product package but the API types, the image
// specs (cluster) and the analysis token Secret format (kargo); nothing that
// ships imports it (TestNothingThatShipsImportsTheHarness).
package framework
