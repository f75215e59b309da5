package stack

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/stackflow-io/stackflow/internal/stackref"
	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// StackNameLabel marks the Workspace and Updates of a Stack.
const StackNameLabel = "pulumi.com/stack-name"

// SpecError is a spec the operator cannot act on as written: the Stack stalls
// until it changes.
type SpecError struct{ Msg string }

func (e *SpecError) Error() string { return e.Msg }

func specErrorf(format string, args ...any) error {
	return &SpecError{Msg: fmt.Sprintf(format, args...)}
}

// Source is a resolved program source.
type Source struct {
	// Git: repository, commit, directory, credentials.
	GitURL  string
	Commit  string
	Dir     string
	Shallow bool
	GitAuth *autov1alpha1.GitAuth
	// Artifact: a tarball URL and digest (Program or Flux source).
	ArtifactURL string
	Digest      string
	// Revision identifies what is deployed: the commit, or the artifact's
	// revision.
	Revision string
}

// Inputs are the values the controller read from the cluster for a Stack.
type Inputs struct {
	Source Source
	// ConfigMapValues holds each configRef's value, keyed by config key.
	ConfigMapValues map[string]string
	// Digest is the keyed digest of every referenced value (InputsDigests).
	Digest string
	// StartDigest is the keyed digest of the values the workspace reads at
	// start; it goes into the workspace environment (InputsDigestEnv).
	StartDigest string
}

var envNameUnsafe = regexp.MustCompile(`[^A-Za-z0-9_]`)

// secretEnvName is the workspace variable carrying a secretsRef value.
func secretEnvName(key string) string {
	return "STACKFLOW_SECRET_" + strings.ToUpper(envNameUnsafe.ReplaceAllString(key, "_"))
}

// Config turns the Stack's config, configRef, secretsRef and deprecated secrets
// into workspace config items, and the environment they need. Secret values
// never enter the Workspace: Secret references become secretKeyRef variables.
func Config(s *pulumiv1.Stack, in Inputs) ([]autov1alpha1.ConfigItem, []corev1.EnvVar, error) {
	var items []autov1alpha1.ConfigItem
	var env []corev1.EnvVar
	t := true
	for _, k := range slices.Sorted(maps.Keys(s.Spec.Config)) {
		items = append(items, autov1alpha1.ConfigItem{Key: k, Value: canonicalJSON(s.Spec.Config[k].Raw)})
	}
	for _, k := range slices.Sorted(maps.Keys(s.Spec.ConfigRef)) {
		ref := s.Spec.ConfigRef[k]
		raw, ok := in.ConfigMapValues[k]
		if !ok {
			return nil, nil, fmt.Errorf("config %s: configmap %s key %s not read", k, ref.Name, ref.Key)
		}
		var val any = raw
		if ref.JSON != nil && *ref.JSON {
			if err := json.Unmarshal([]byte(raw), &val); err != nil {
				return nil, nil, specErrorf("config %s: configmap %s key %s is not valid JSON (json: true)", k, ref.Name, ref.Key)
			}
		}
		// Canonical JSON (compact, sorted keys), as the API server stores it, so
		// an unchanged Workspace compares equal.
		b, _ := json.Marshal(val)
		items = append(items, autov1alpha1.ConfigItem{Key: k, Value: &apiextensionsv1.JSON{Raw: b}})
	}
	for _, k := range slices.Sorted(maps.Keys(s.Spec.SecretRefs)) {
		ref := s.Spec.SecretRefs[k]
		item := autov1alpha1.ConfigItem{Key: k, Secret: &t}
		switch ref.SelectorType {
		case pulumiv1.ResourceSelectorSecret:
			name := secretEnvName(k)
			env = append(env, corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: ref.SecretRef.Name}, Key: ref.SecretRef.Key}}})
			item.ValueFrom = &autov1alpha1.ConfigValueFrom{Env: name}
		case pulumiv1.ResourceSelectorLiteral:
			b, _ := json.Marshal(ref.LiteralRef.Value)
			item.Value = &apiextensionsv1.JSON{Raw: b}
		case pulumiv1.ResourceSelectorEnv:
			item.ValueFrom = &autov1alpha1.ConfigValueFrom{Env: ref.Env.Name}
		case pulumiv1.ResourceSelectorFS:
			item.ValueFrom = &autov1alpha1.ConfigValueFrom{Path: ref.FileSystem.Path}
		default:
			return nil, nil, specErrorf("secretsRef %s: unknown type %q", k, ref.SelectorType)
		}
		items = append(items, item)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Spec.Secrets)) {
		b, _ := json.Marshal(s.Spec.Secrets[k])
		items = append(items, autov1alpha1.ConfigItem{Key: k, Value: &apiextensionsv1.JSON{Raw: b}, Secret: &t})
	}
	return items, env, nil
}

// Env turns envRefs, backend and the deprecated accessTokenSecret, envs and
// envSecrets into workspace environment.
func Env(s *pulumiv1.Stack) ([]corev1.EnvVar, []corev1.EnvFromSource, error) {
	var env []corev1.EnvVar
	var from []corev1.EnvFromSource
	if s.Spec.Backend != "" {
		env = append(env, corev1.EnvVar{Name: "PULUMI_BACKEND_URL", Value: s.Spec.Backend})
	}
	if s.Spec.AccessTokenSecret != "" {
		env = append(env, secretEnv("PULUMI_ACCESS_TOKEN", s.Spec.AccessTokenSecret, stackref.AccessTokenKey))
	}
	for _, name := range slices.Sorted(maps.Keys(s.Spec.EnvRefs)) {
		ref := s.Spec.EnvRefs[name]
		switch ref.SelectorType {
		case pulumiv1.ResourceSelectorSecret:
			env = append(env, secretEnv(name, ref.SecretRef.Name, ref.SecretRef.Key))
		case pulumiv1.ResourceSelectorLiteral:
			env = append(env, corev1.EnvVar{Name: name, Value: ref.LiteralRef.Value})
		case pulumiv1.ResourceSelectorEnv:
			// Kubernetes expands $(VAR) from the workspace's own environment.
			env = append(env, corev1.EnvVar{Name: name, Value: "$(" + ref.Env.Name + ")"})
		default:
			return nil, nil, specErrorf("envRefs %s: type %s is not supported; use Secret, Literal or Env (mount files through workspaceTemplate)", name, ref.SelectorType)
		}
	}
	for _, cm := range s.Spec.Envs {
		from = append(from, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}})
	}
	for _, sec := range s.Spec.SecretEnvs {
		from = append(from, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: sec}}})
	}
	return env, from, nil
}

func secretEnv(name, secret, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}}
}

// Workspace derives the Stack's Workspace: source, stack configuration,
// environment, service account, then workspaceTemplate merged over it
// (strategic merge patch).
func Workspace(s *pulumiv1.Stack, in Inputs) (*autov1alpha1.Workspace, error) {
	cfg, cfgEnv, err := Config(s, in)
	if err != nil {
		return nil, err
	}
	env, from, err := Env(s)
	if err != nil {
		return nil, err
	}
	if in.StartDigest != "" {
		env = append(env, corev1.EnvVar{Name: InputsDigestEnv, Value: in.StartDigest})
	}
	create := !s.Spec.UseLocalStackOnly
	ws := &autov1alpha1.Workspace{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, Labels: ShardLabels(s, map[string]string{StackNameLabel: s.Name})},
		Spec: autov1alpha1.WorkspaceSpec{
			ServiceAccountName: s.Spec.ServiceAccountName,
			Env:                append(env, cfgEnv...),
			EnvFrom:            from,
			Stacks: []autov1alpha1.WorkspaceStack{{
				Name: s.Spec.Stack, Create: &create, Config: cfg, Environment: s.Spec.Environment,
			}},
		},
	}
	if s.Spec.SecretsProvider != "" {
		sp := s.Spec.SecretsProvider
		ws.Spec.Stacks[0].SecretsProvider = &sp
	}
	src := in.Source
	switch {
	case src.GitURL != "":
		ws.Spec.Git = &autov1alpha1.GitSource{URL: src.GitURL, Ref: src.Commit, Dir: src.Dir, Shallow: src.Shallow, Auth: src.GitAuth}
	case src.ArtifactURL != "":
		ws.Spec.Flux = &autov1alpha1.FluxSource{Url: src.ArtifactURL, Digest: src.Digest, Dir: src.Dir}
	}
	if t := s.Spec.WorkspaceTemplate; t != nil {
		applyMeta(&ws.ObjectMeta, t.Metadata)
		if t.Spec != nil {
			merged, err := mergeSpec(ws.Spec, t.Spec, autov1alpha1.WorkspaceSpec{})
			if err != nil {
				return nil, specErrorf("workspaceTemplate: %v", err)
			}
			ws.Spec = merged
		}
	}
	if ws.Spec.Git == nil && ws.Spec.Flux == nil && ws.Spec.Local == nil {
		return nil, specErrorf("no program source: set spec.projectRepo, spec.programRef or spec.fluxSource, or spec.workspaceTemplate.spec.local for a program in the image")
	}
	return ws, nil
}

// Update annotations: the facts a Stack decided the Update on, so that a
// restarted operator that finds an Update it did not record knows what it
// runs for.
const (
	AnnotationNumber           = "stackflow.io/update-number"
	AnnotationPurpose          = "stackflow.io/purpose"
	AnnotationRevision         = "stackflow.io/revision"
	AnnotationGeneration       = "stackflow.io/generation"
	AnnotationReconcileRequest = "stackflow.io/reconcile-request"
	AnnotationInputsDigest     = "stackflow.io/inputs-digest"
	// AnnotationPlanFor, on a plan preview, is what applying its plan does:
	// deploy, or remediate.
	AnnotationPlanFor = "stackflow.io/plan-for"
)

// ResultFinalizer is put on every Update a Stack starts and removed once the
// Stack has recorded the Update's result: an Update's TTL (even 0s) or a
// deletion can never lose a result the Stack has not seen.
const ResultFinalizer = "stackflow.io/stack-result"

// UpdateName is the name of a Stack's Update number n: deterministic, so a
// reconcile that created it but could not record it finds it again instead of
// starting another.
func UpdateName(s *pulumiv1.Stack, n int64) string {
	return fmt.Sprintf("%s-%d", s.Name, n)
}

// Plan is what an Update is started for.
type Plan struct {
	// Number is the Update's sequence number (status.updateSequence + 1).
	Number  int64
	Type    autov1alpha1.UpdateType
	Purpose pulumiv1.UpdatePurpose
	// Refresh forces a refresh (drift checks, remediation).
	Refresh      bool
	Revision     string
	InputsDigest string
	Message      string
	// SavePlan: a preview saving its update plan (Purpose plan); PlanFor is
	// what applying the plan will do (deploy or remediate).
	SavePlan bool
	PlanFor  pulumiv1.UpdatePurpose
	// PlanSecret: an up constrained to the plan in this Secret.
	PlanSecret string
	// TTL, when set, is the Update's time to live at least (a plan
	// preview lives as long as its plan may be approved).
	TTL time.Duration
}

// Update derives the Update of a plan, with updateTemplate merged over it.
func Update(s *pulumiv1.Stack, p Plan) (*autov1alpha1.Update, error) {
	message := p.Message
	u := &autov1alpha1.Update{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.Namespace, Name: UpdateName(s, p.Number), Labels: ShardLabels(s, map[string]string{StackNameLabel: s.Name}),
			Finalizers: []string{ResultFinalizer},
		},
		Spec: autov1alpha1.UpdateSpec{
			WorkspaceName: s.Name, StackName: s.Spec.Stack, Type: p.Type, Message: &message,
		},
	}
	if p.Type != autov1alpha1.DestroyType {
		u.Spec.Target = s.Spec.Targets
		if s.Spec.TargetDependents && p.Purpose != pulumiv1.UpdatePurposeDriftCheck {
			u.Spec.TargetDependents = &s.Spec.TargetDependents
		}
	}
	if s.Spec.Refresh || p.Refresh {
		refresh := true
		u.Spec.Refresh = &refresh
	}
	if s.Spec.RunProgram {
		u.Spec.RunProgram = &s.Spec.RunProgram
	}
	if t := s.Spec.UpdateTemplate; t != nil {
		applyMeta(&u.ObjectMeta, t.Metadata)
		if t.Spec != nil {
			merged, err := mergeSpec(u.Spec, t.Spec, autov1alpha1.UpdateSpec{})
			if err != nil {
				return nil, specErrorf("updateTemplate: %v", err)
			}
			// The template cannot retarget the update, nor turn off the
			// refresh a drift check or a remediation needs.
			merged.WorkspaceName, merged.StackName, merged.Type = u.Spec.WorkspaceName, u.Spec.StackName, u.Spec.Type
			if p.Refresh {
				merged.Refresh = u.Spec.Refresh
			}
			u.Spec = merged
		}
	}
	if p.SavePlan {
		u.Spec.SavePlan = &p.SavePlan
		// The template's TTL may be longer, never shorter: the plan is
		// kept (owned by the Update) while it may be approved.
		if t := u.Spec.TtlAfterCompleted; t == nil || t.Duration < p.TTL {
			u.Spec.TtlAfterCompleted = &metav1.Duration{Duration: p.TTL}
		}
	}
	u.Spec.PlanSecretName = p.PlanSecret
	if u.Annotations == nil {
		u.Annotations = map[string]string{}
	}
	if p.PlanFor != "" {
		u.Annotations[AnnotationPlanFor] = string(p.PlanFor)
	}
	u.Annotations[AnnotationNumber] = strconv.FormatInt(p.Number, 10)
	u.Annotations[AnnotationPurpose] = string(p.Purpose)
	u.Annotations[AnnotationRevision] = p.Revision
	u.Annotations[AnnotationGeneration] = strconv.FormatInt(s.Generation, 10)
	u.Annotations[AnnotationReconcileRequest] = s.Annotations[pulumiv1.ReconcileRequestAnnotation]
	u.Annotations[AnnotationInputsDigest] = p.InputsDigest
	return u, nil
}

// Current is the currentUpdate record of an Update started from a Plan, read
// back from the Update's annotations.
func Current(u *autov1alpha1.Update) pulumiv1.CurrentStackUpdate {
	a := u.Annotations
	n, _ := strconv.ParseInt(a[AnnotationNumber], 10, 64)
	gen, _ := strconv.ParseInt(a[AnnotationGeneration], 10, 64)
	purpose := pulumiv1.UpdatePurpose(a[AnnotationPurpose])
	if purpose == "" {
		purpose = pulumiv1.UpdatePurposeDeploy
	}
	return pulumiv1.CurrentStackUpdate{
		Name: u.Name, Number: n, Purpose: purpose, Generation: gen, Commit: a[AnnotationRevision],
		ReconcileRequest: a[AnnotationReconcileRequest], InputsDigest: a[AnnotationInputsDigest],
	}
}

// InputValue is one value a Stack reads from a ConfigMap or Secret.
type InputValue struct {
	// Ref names it: "configRef/<key>", "secretsRef/<key>", "envRefs/<name>",
	// "envs/<configmap>/<key>", "envSecrets/<secret>/<key>".
	Ref   string
	Value []byte
	// AtStart: the workspace reads it when it starts (an environment
	// variable), so a change must restart the workspace.
	AtStart bool
}

// InputsDigests returns the keyed digests (HMAC-SHA256) of the values: of all
// of them (status.lastUpdate.inputsDigest), and of those the workspace reads
// at start (put in the Workspace's environment, so a change restarts it).
// Secret values enter only through the keyed hash: the digests reveal nothing
// without the operator's key. Both are empty when there are no values.
func InputsDigests(key []byte, values []InputValue) (all, atStart string) {
	if len(values) == 0 {
		return "", ""
	}
	sorted := append([]InputValue(nil), values...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Ref < sorted[j].Ref })
	ha, hs := hmac.New(sha256.New, key), hmac.New(sha256.New, key)
	starts := 0
	for _, v := range sorted {
		for _, h := range []hash.Hash{ha, hs} {
			if h == hs && !v.AtStart {
				continue
			}
			// Length-prefixed, so no two lists of values hash alike.
			fmt.Fprintf(h, "%d:%s%d:", len(v.Ref), v.Ref, len(v.Value))
			h.Write(v.Value)
		}
		if v.AtStart {
			starts++
		}
	}
	all = "hmac-sha256:" + hex.EncodeToString(ha.Sum(nil))[:32]
	if starts > 0 {
		atStart = "hmac-sha256:" + hex.EncodeToString(hs.Sum(nil))[:32]
	}
	return all, atStart
}

// InputsDigestEnv carries the digest of the inputs a workspace reads at start
// in its environment: a changed Secret or ConfigMap value changes the
// workspace's spec, which restarts it with the new value.
const InputsDigestEnv = "STACKFLOW_INPUTS_DIGEST"

// applyMeta adds a template's labels and annotations to an object's.
func applyMeta(m *metav1.ObjectMeta, t autov1alpha1.EmbeddedObjectMeta) {
	for k, v := range t.Labels {
		m.Labels[k] = v
	}
	if len(t.Annotations) > 0 && m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	for k, v := range t.Annotations {
		m.Annotations[k] = v
	}
}

// mergeSpec applies patch over base as a strategic merge patch using schema's
// patch strategies.
func mergeSpec[T any](base T, patch *T, schema T) (T, error) {
	var out T
	orig, err := json.Marshal(base)
	if err != nil {
		return out, err
	}
	p, err := json.Marshal(patch)
	if err != nil {
		return out, err
	}
	merged, err := strategicpatch.StrategicMergePatch(orig, p, schema)
	if err != nil {
		return out, err
	}
	err = json.Unmarshal(merged, &out)
	return out, err
}

// canonicalJSON re-encodes a JSON value compactly with sorted keys.
func canonicalJSON(raw []byte) *apiextensionsv1.JSON {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return &apiextensionsv1.JSON{Raw: raw}
	}
	b, _ := json.Marshal(v)
	return &apiextensionsv1.JSON{Raw: b}
}

// PrunableUpdates names the Updates of a Stack that a history of limit
// finished Updates leaves out: finished, recorded (numbered at most
// status.updateSequence), released of their result finalizer, not deleted
// yet, not named by the Stack's status (last, current, drift check, plan
// preview and apply, export) — the oldest first, beyond the newest limit of
// the finished ones.
func PrunableUpdates(s *pulumiv1.Stack, updates []autov1alpha1.Update, limit int) []string {
	kept := map[string]bool{}
	st := s.Status
	if st.LastUpdate != nil {
		kept[st.LastUpdate.Name] = true
	}
	if st.CurrentUpdate != nil {
		kept[st.CurrentUpdate.Name] = true
	}
	if st.DriftCheck != nil {
		kept[st.DriftCheck.Update] = true
	}
	if st.Plan != nil {
		kept[st.Plan.Update], kept[st.Plan.ApplyUpdate] = true, true
	}
	if st.Exports != nil {
		kept[st.Exports.Update] = true
	}
	type numbered struct {
		name string
		n    int64
		held bool
	}
	var finished []numbered
	for i := range updates {
		u := &updates[i]
		n, err := strconv.ParseInt(u.Annotations[AnnotationNumber], 10, 64)
		if err != nil || n > st.UpdateSequence || !u.DeletionTimestamp.IsZero() ||
			!apimeta.IsStatusConditionTrue(u.Status.Conditions, autov1alpha1.UpdateConditionTypeComplete) {
			continue
		}
		finished = append(finished, numbered{u.Name, n, slices.Contains(u.Finalizers, ResultFinalizer)})
	}
	sort.Slice(finished, func(i, j int) bool { return finished[i].n > finished[j].n })
	var prune []string
	for i := len(finished) - 1; i >= limit; i-- {
		name := finished[i].name
		if kept[name] || finished[i].held {
			continue
		}
		prune = append(prune, name)
	}
	return prune
}

// ShardLabels adds the Stack's shard label (pulumiv1.ShardLabel), if it has
// one, to labels: its Workspace and Updates go to the shard the Stack goes
// to.
func ShardLabels(s *pulumiv1.Stack, labels map[string]string) map[string]string {
	if v, ok := s.Labels[pulumiv1.ShardLabel]; ok {
		labels[pulumiv1.ShardLabel] = v
	}
	return labels
}

// SameShard: obj is labelled for the Stack's shard (both unlabelled, or
// with the same value).
func SameShard(s *pulumiv1.Stack, objLabels map[string]string) bool {
	a, aok := s.Labels[pulumiv1.ShardLabel]
	b, bok := objLabels[pulumiv1.ShardLabel]
	return aok == bok && a == b
}
