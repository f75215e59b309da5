package pod

import (
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
)

// revisionFlags are the agent flags naming the revision of the program
// source the agent fetches when it starts. A running agent moves to another
// revision through its Checkout call, so these flags alone never call for a
// new pod or process.
var revisionFlags = []string{"--git-ref=", "--artifact-url=", "--artifact-digest="}

func revisionFlag(arg string) (string, bool) {
	for _, f := range revisionFlags {
		if strings.HasPrefix(arg, f) {
			return f, true
		}
	}
	return "", false
}

// WithoutRevision is args with the values of the revision flags left out
// (the flags themselves kept, so that a source that gains or loses one
// still differs).
func WithoutRevision(args []string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if f, ok := revisionFlag(a); ok {
			out[i] = f
		}
	}
	return out
}

// RevisionArgs are the revision flags among the workspace container's
// arguments in sts's pod template: the revision a new pod would start at.
func RevisionArgs(sts *appsv1.StatefulSet) []string {
	var out []string
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name != ContainerName {
			continue
		}
		for _, a := range c.Args {
			if _, ok := revisionFlag(a); ok {
				out = append(out, a)
			}
		}
	}
	return out
}
