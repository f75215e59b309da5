package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stackflow-io/stackflow/internal/conditions"
	"github.com/stackflow-io/stackflow/internal/stackref"
	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
	"github.com/stackflow-io/stackflow/operator/internal/gitresolve"
	"github.com/stackflow-io/stackflow/operator/internal/stack"
)

// sourceError: the program source, or an object the Stack refers to, is
// missing or unreadable. The Stack stalls with the message (which names what
// is missing, never a secret value) and looks again later.
type sourceError struct{ msg string }

func (e *sourceError) Error() string { return e.msg }

func sourceErrorf(format string, args ...any) error {
	return &sourceError{msg: fmt.Sprintf(format, args...)}
}

// unreachableError: the source could not be reached (network error,
// timeout, server error). Transient: the Stack is Reconciling and retries
// with backoff, never Stalled.
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// PushAnnotation on a Stack carries the last push received for its branch
// (by the webhook on any operator replica): a new value makes the next
// resolution list the repository afresh.
const PushAnnotation = "stackflow.io/push"

// classifySourceError maps a source, input or derivation error to the
// Stack's state: a spec the user must fix and a missing source or reference
// stall (the source is looked at again: it may appear, and watched objects
// wake the Stack when they do); an unreachable source waits with backoff;
// anything else is transient.
func (r *StackReconciler) classifySourceError(s *pulumiv1.Stack, err error) error {
	var specErr *stack.SpecError
	var srcErr *sourceError
	var unreachable *unreachableError
	after := time.Minute
	if r.ResyncOverride > 0 {
		after = r.ResyncOverride
	}
	switch {
	case gitresolve.IsPending(err):
		// The repository's listing is under way, off the workers; its end
		// wakes the Stack. A Stack whose status describes its current spec
		// keeps it meanwhile (an operator that just started lists every
		// repository once), others say what they wait for.
		if specCurrent(s) {
			return upToDate(pendingRecheck)
		}
		return &waitingError{reason: pulumiv1.ReconcilingResolvingSourceReason, msg: err.Error(), requeue: pendingRecheck}
	case errors.As(err, &specErr):
		return &stallingError{reason: pulumiv1.StalledSpecInvalidReason, msg: err.Error()}
	case errors.As(err, &srcErr):
		return &stallingError{reason: pulumiv1.StalledSourceUnavailableReason, msg: err.Error(), requeue: after}
	case errors.As(err, &unreachable):
		retry, ok := gitresolve.RetryAfter(err)
		if !ok {
			retry = 15 * time.Second
		}
		return &waitingError{reason: pulumiv1.ReconcilingSourceUnreachableReason, msg: err.Error() + "; retrying", requeue: max(retry, time.Second)}
	}
	return err
}

// pendingRecheck is when a Stack waiting for a listing looks again, should
// the listing's end not wake it (it always should).
const pendingRecheck = time.Minute

// specCurrent: the Stack's status is Ready for its current generation and
// reconcile request.
func specCurrent(s *pulumiv1.Stack) bool {
	return s.Status.ObservedGeneration == s.Generation &&
		s.Status.ObservedReconcileRequest == s.Annotations[pulumiv1.ReconcileRequestAnnotation] &&
		conditions.IsTrue(s, s.Status.Conditions, pulumiv1.ReadyCondition)
}

// resolveSource finds the revision to deploy: a branch head, a pinned commit,
// a Program's artifact or a Flux source's artifact.
func (r *StackReconciler) resolveSource(ctx context.Context, s *pulumiv1.Stack) (stack.Source, error) {
	switch {
	case s.Spec.GitSource != nil && s.Spec.ProjectRepo != "":
		commit := s.Spec.Commit
		if s.Spec.Branch != "" {
			auth, err := r.gitCredentials(ctx, s)
			if err != nil {
				return stack.Source{}, err
			}
			if token := s.Annotations[PushAnnotation]; token != "" && r.Git != nil {
				// A push was received for this repository (by any replica).
				r.Git.InvalidateOnce(s.Spec.ProjectRepo, token)
			}
			commit, err = r.Resolve(ctx, gitresolve.Request{URL: s.Spec.ProjectRepo, Branch: s.Spec.Branch, Auth: auth, Stack: client.ObjectKeyFromObject(s)})
			if err != nil {
				if gitresolve.IsPending(err) {
					return stack.Source{}, err
				}
				err = fmt.Errorf("resolve branch %s: %w", s.Spec.Branch, err)
				if gitresolve.IsUnavailable(err) {
					return stack.Source{}, &sourceError{msg: err.Error()}
				}
				return stack.Source{}, &unreachableError{err: err}
			}
		}
		return r.gitSource(ctx, s, commit)
	case s.Spec.ProgramRef != nil:
		var p pulumiv1.Program
		if err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Spec.ProgramRef.Name}, &p); err != nil {
			if apierrors.IsNotFound(err) {
				return stack.Source{}, sourceErrorf("program %s not found", s.Spec.ProgramRef.Name)
			}
			return stack.Source{}, err
		}
		a := p.Status.Artifact
		if a == nil || p.Status.ObservedGeneration != p.Generation {
			return stack.Source{}, sourceErrorf("program %s has no artifact for its current generation yet", p.Name)
		}
		return stack.Source{ArtifactURL: a.URL, Digest: a.Digest, Revision: a.Revision}, nil
	case s.Spec.FluxSource != nil:
		return r.fluxSource(ctx, s)
	}
	// No source field: the program is in the workspace image
	// (workspaceTemplate.spec.local); stack.Workspace checks that.
	return stack.Source{}, nil
}

func (r *StackReconciler) gitSource(ctx context.Context, s *pulumiv1.Stack, commit string) (stack.Source, error) {
	auth, err := r.gitAuth(ctx, s)
	if err != nil {
		return stack.Source{}, err
	}
	return stack.Source{GitURL: s.Spec.ProjectRepo, Commit: commit, Dir: s.Spec.RepoDir, Shallow: s.Spec.Shallow, GitAuth: auth, Revision: commit}, nil
}

// gitAuth maps spec.gitAuth, or else the deprecated gitAuthSecret, to the
// Workspace's Secret references (gitauth).
func (r *StackReconciler) gitAuth(ctx context.Context, s *pulumiv1.Stack) (*autov1alpha1.GitAuth, error) {
	auth, err := stack.GitAuth(s, r.GitHubAPIHosts)
	if err != nil || auth != nil || s.Spec.GitAuthSecret == "" {
		return auth, err
	}
	sec, err := r.secret(ctx, s.Namespace, s.Spec.GitAuthSecret)
	if err != nil {
		return nil, err
	}
	if auth, err = gitauth.FromLegacySecret(sec.Name, sec.Data); err != nil {
		return nil, &sourceError{msg: err.Error()}
	}
	return auth, nil
}

// gitCredentials reads the git credentials the operator needs to resolve a
// branch, with the operator's known_hosts when the Stack names none.
func (r *StackReconciler) gitCredentials(ctx context.Context, s *pulumiv1.Stack) (gitauth.Credentials, error) {
	ga, err := r.gitAuth(ctx, s)
	if err != nil {
		return gitauth.Credentials{}, err
	}
	c, err := gitauth.Read(ga, r.SSHKnownHosts, func(sel *corev1.SecretKeySelector) (string, error) {
		return r.secretKey(ctx, s.Namespace, sel.Name, sel.Key)
	})
	var unusable *gitauth.CredentialsError
	if errors.As(err, &unusable) {
		return c, &sourceError{msg: err.Error()}
	}
	return c, err
}

// fluxSource reads a Flux source object's artifact.
func (r *StackReconciler) fluxSource(ctx context.Context, s *pulumiv1.Stack) (stack.Source, error) {
	ref := s.Spec.FluxSource.SourceRef
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return stack.Source{}, &stack.SpecError{Msg: fmt.Sprintf("fluxSource.sourceRef.apiVersion %q: %v", ref.APIVersion, err)}
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gv.WithKind(ref.Kind))
	if err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: ref.Name}, obj); err != nil {
		return stack.Source{}, sourceErrorf("flux source %s %s: %v", ref.Kind, ref.Name, err)
	}
	url, _, _ := unstructured.NestedString(obj.Object, "status", "artifact", "url")
	digest, _, _ := unstructured.NestedString(obj.Object, "status", "artifact", "digest")
	rev, _, _ := unstructured.NestedString(obj.Object, "status", "artifact", "revision")
	if url == "" || digest == "" {
		return stack.Source{}, sourceErrorf("flux source %s %s has no artifact yet", ref.Kind, ref.Name)
	}
	return stack.Source{ArtifactURL: url, Digest: digest, Dir: s.Spec.FluxSource.Dir, Revision: rev}, nil
}

// readInputs reads configRef values and checks that every Secret the Stack
// refers to exists with its key, so a missing one stalls the Stack with its
// name instead of failing later in the workspace. The values read (secrets
// included) enter only the keyed digests of the inputs. The references come
// from the one walk of them (stackref.Refs); the inputs are those of configRef,
// secretsRef, envRefs, envs and envSecrets (git credentials and the
// deprecated accessTokenSecret are not inputs of updates).
func (r *StackReconciler) readInputs(ctx context.Context, s *pulumiv1.Stack, src stack.Source) (stack.Inputs, error) {
	in := stack.Inputs{Source: src, ConfigMapValues: map[string]string{}}
	var values []stack.InputValue
	for _, ref := range stackref.Refs(s) {
		// The digest's labels ("configRef/<key>", "secretsRef <key>", ...)
		// are part of every stored inputsDigest: changing one would run an
		// update of every Stack.
		switch ref.Field {
		case stackref.FieldConfigRef:
			var cm corev1.ConfigMap
			if err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: ref.Name}, &cm); err != nil {
				if apierrors.IsNotFound(err) {
					return in, sourceErrorf("configRef %s: configmap %s not found", ref.Entry, ref.Name)
				}
				return in, err
			}
			v, ok := cm.Data[ref.Key]
			if !ok {
				return in, sourceErrorf("configRef %s: configmap %s has no key %s", ref.Entry, ref.Name, ref.Key)
			}
			in.ConfigMapValues[ref.Entry] = v
			values = append(values, stack.InputValue{Ref: "configRef/" + ref.Entry, Value: []byte(v)})
		case stackref.FieldSecretsRef, stackref.FieldEnvRefs:
			if ref.Kind != stackref.KindSecret || ref.Name == "" {
				continue // a literal, or the workspace's own environment or files
			}
			what := ref.Field + " " + ref.Entry
			v, err := r.secretKey(ctx, s.Namespace, ref.Name, ref.Key)
			if err != nil {
				return in, fmt.Errorf("%s: %w", what, err)
			}
			values = append(values, stack.InputValue{Ref: what, Value: []byte(v), AtStart: true})
		case stackref.FieldEnvs:
			// The deprecated envs and envSecrets export whole objects; a
			// missing one is the workspace's to report (Kubernetes waits
			// for it).
			var cm corev1.ConfigMap
			if err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: ref.Name}, &cm); err == nil {
				for k, v := range cm.Data {
					values = append(values, stack.InputValue{Ref: "envs/" + ref.Name + "/" + k, Value: []byte(v), AtStart: true})
				}
			} else if !apierrors.IsNotFound(err) {
				return in, err
			}
		case stackref.FieldEnvSecrets:
			var sec corev1.Secret
			if err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: ref.Name}, &sec); err == nil {
				for k, v := range sec.Data {
					values = append(values, stack.InputValue{Ref: "envSecrets/" + ref.Name + "/" + k, Value: v, AtStart: true})
				}
			} else if !apierrors.IsNotFound(err) {
				return in, err
			}
		}
	}
	in.Digest, in.StartDigest = stack.InputsDigests(r.DigestKey, values)
	return in, nil
}

func (r *StackReconciler) secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	var sec corev1.Secret
	if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, sourceErrorf("secret %s not found", name)
		}
		return nil, err
	}
	return &sec, nil
}

func (r *StackReconciler) secretKey(ctx context.Context, ns, name, key string) (string, error) {
	sec, err := r.secret(ctx, ns, name)
	if err != nil {
		return "", err
	}
	v, ok := sec.Data[key]
	if !ok {
		return "", sourceErrorf("secret %s has no key %s", name, key)
	}
	return string(v), nil
}
