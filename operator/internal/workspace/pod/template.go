package pod

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
)

// nonRootID is the user, group and fsGroup of the restricted profile: the
// "pulumi" user of the pulumi/pulumi-*-nonroot images.
const nonRootID int64 = 1000

const annotationDefaultContainer = "kubectl.kubernetes.io/default-container"

// podTemplate is the Workspace's pod template, spec.podTemplate applied, without
// the hash annotation.
func podTemplate(ws *autov1alpha1.Workspace, opts Options) (corev1.PodTemplateSpec, error) {
	podSC, containerSC, err := securityContexts(ws.Spec.SecurityProfile)
	if err != nil {
		return corev1.PodTemplateSpec{}, err
	}
	main, err := workspaceContainer(ws, opts, containerSC)
	if err != nil {
		return corev1.PodTemplateSpec{}, err
	}
	sa := ws.Spec.ServiceAccountName
	if sa == "" {
		sa = opts.DefaultServiceAccount
	}
	if sa == "" {
		sa = "default"
	}
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{
			Labels: Labels(ws.Name),
			// kubectl logs/exec pick the workspace container, not a sidecar.
			Annotations: map[string]string{annotationDefaultContainer: ContainerName},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName: sa,
			// The program's providers may authenticate to the cluster (or a
			// cloud, through workload identity) as the service account.
			AutomountServiceAccountToken:  new(true),
			TerminationGracePeriodSeconds: new(terminationGracePeriod),
			SecurityContext:               podSC,
			InitContainers:                []corev1.Container{bootstrapContainer(opts, containerSC.DeepCopy())},
			Containers:                    []corev1.Container{main},
			// No sizeLimit: plugins and dependencies of a program can be large;
			// the ephemeral-storage request is what protects against eviction.
			Volumes: []corev1.Volume{
				{Name: shareVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: tmpVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
	if err := applyPodTemplate(&tmpl, ws.Spec.PodTemplate); err != nil {
		return corev1.PodTemplateSpec{}, err
	}
	listEnvFromSecrets(&tmpl.Spec, opts.EnvFromSecretKeys)
	return tmpl, nil
}

// EnvFromSecrets are the Secrets the workspace container's envFrom names in
// spec (spec.envFrom and spec.podTemplate merged), whose keys the runtime
// passes back as Options.EnvFromSecretKeys.
func EnvFromSecrets(spec *corev1.PodSpec) []string {
	var names []string
	for _, c := range spec.Containers {
		if c.Name != ContainerName {
			continue
		}
		for _, f := range c.EnvFrom {
			if f.SecretRef != nil && f.SecretRef.Name != "" && !slices.Contains(names, f.SecretRef.Name) {
				names = append(names, f.SecretRef.Name)
			}
		}
	}
	return names
}

// listEnvFromSecrets adds the variables the workspace container gets from
// envFrom Secrets (prefix + key, for keys that are valid variable names, as
// the kubelet sets only those) to SecretEnvNamesVar.
func listEnvFromSecrets(spec *corev1.PodSpec, keys map[string][]string) {
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if c.Name != ContainerName {
			continue
		}
		var names []string
		for _, f := range c.EnvFrom {
			if f.SecretRef == nil {
				continue
			}
			for _, k := range keys[f.SecretRef.Name] {
				if name := f.Prefix + k; len(validation.IsEnvVarName(name)) == 0 {
					names = append(names, name)
				}
			}
		}
		if len(names) == 0 {
			return
		}
		at := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == SecretEnvNamesVar })
		if at < 0 {
			c.Env = append(c.Env, corev1.EnvVar{Name: SecretEnvNamesVar})
			at = len(c.Env) - 1
		} else if v := c.Env[at].Value; v != "" {
			names = append(names, strings.Split(v, ",")...)
		}
		slices.Sort(names)
		c.Env[at].Value = strings.Join(slices.Compact(names), ",")
	}
}

// securityContexts returns the pod's and each container's security context for
// a profile.
func securityContexts(profile autov1alpha1.SecurityProfile) (*corev1.PodSecurityContext, *corev1.SecurityContext, error) {
	seccomp := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	switch profile {
	case autov1alpha1.SecurityProfileRestricted, "":
		return &corev1.PodSecurityContext{
				RunAsNonRoot:   new(true),
				RunAsUser:      new(nonRootID),
				RunAsGroup:     new(nonRootID),
				FSGroup:        new(nonRootID),
				SeccompProfile: seccomp,
			}, &corev1.SecurityContext{
				AllowPrivilegeEscalation: new(false),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				// Writable paths are the emptyDirs: /share and /tmp.
				ReadOnlyRootFilesystem: new(true),
			}, nil
	case autov1alpha1.SecurityProfileBaseline:
		return &corev1.PodSecurityContext{
				SeccompProfile: seccomp,
			}, &corev1.SecurityContext{
				AllowPrivilegeEscalation: new(false),
				ReadOnlyRootFilesystem:   new(false),
			}, nil
	default:
		return nil, nil, fmt.Errorf("spec.securityProfile %q is not one of %q, %q",
			profile, autov1alpha1.SecurityProfileRestricted, autov1alpha1.SecurityProfileBaseline)
	}
}

// applyPodTemplate adds spec.podTemplate's labels and annotations to tmpl and
// applies its spec as a strategic merge patch over tmpl's spec.
func applyPodTemplate(tmpl *corev1.PodTemplateSpec, pt *autov1alpha1.EmbeddedPodTemplateSpec) error {
	if pt == nil {
		return nil
	}
	if err := mergeLabels(tmpl.Labels, pt.Metadata.Labels); err != nil {
		return fmt.Errorf("spec.podTemplate.metadata.labels: %w", err)
	}
	if _, ok := pt.Metadata.Annotations[AnnotationPodSpecHash]; ok {
		return fmt.Errorf("spec.podTemplate.metadata.annotations: %s is set by the operator", AnnotationPodSpecHash)
	}
	maps.Copy(tmpl.Annotations, pt.Metadata.Annotations)
	if pt.Spec == nil {
		return nil
	}
	if err := checkMergeKeys(pt.Spec); err != nil {
		return fmt.Errorf("spec.podTemplate.spec: %w", err)
	}
	merged, err := mergePodSpec(&tmpl.Spec, pt.Spec)
	if err != nil {
		return fmt.Errorf("apply spec.podTemplate.spec: %w", err)
	}
	if err := checkMerged(merged); err != nil {
		return fmt.Errorf("spec.podTemplate.spec: %w", err)
	}
	tmpl.Spec = *merged
	return nil
}

// mergePodSpec returns base with patch applied as a strategic merge patch
// (the patch strategies and merge keys of corev1.PodSpec: containers and
// volumes merge by name, volumeMounts by mountPath, tolerations replace).
func mergePodSpec(base, patch *corev1.PodSpec) (*corev1.PodSpec, error) {
	baseJSON, err := json.Marshal(base)
	if err != nil {
		return nil, fmt.Errorf("encode generated pod spec: %w", err)
	}
	patchJSON, err := patchBytes(patch)
	if err != nil {
		return nil, err
	}
	out, err := strategicpatch.StrategicMergePatch(baseJSON, patchJSON, corev1.PodSpec{})
	if err != nil {
		return nil, err
	}
	var merged corev1.PodSpec
	if err := json.Unmarshal(out, &merged); err != nil {
		return nil, fmt.Errorf("decode merged pod spec: %w", err)
	}
	keepBaseOrder(&merged, base)
	return &merged, nil
}

// keepBaseOrder puts the generated items of the merged lists first, in their
// order, followed by the items the patch added. The strategic merge puts the
// added items first, but an environment variable may only refer to ($(VAR))
// the ones before it, and the workspace container is expected first (kubectl's
// default container).
func keepBaseOrder(merged, base *corev1.PodSpec) {
	containerName := func(c corev1.Container) string { return c.Name }
	merged.Containers = baseFirst(merged.Containers, base.Containers, containerName)
	merged.InitContainers = baseFirst(merged.InitContainers, base.InitContainers, containerName)
	merged.Volumes = baseFirst(merged.Volumes, base.Volumes, func(v corev1.Volume) string { return v.Name })
	for _, pair := range [][2][]corev1.Container{{merged.Containers, base.Containers}, {merged.InitContainers, base.InitContainers}} {
		for i := range pair[0] {
			c := &pair[0][i]
			j := slices.IndexFunc(pair[1], func(b corev1.Container) bool { return b.Name == c.Name })
			if j < 0 {
				continue
			}
			b := &pair[1][j]
			c.Env = baseFirst(c.Env, b.Env, func(e corev1.EnvVar) string { return e.Name })
			c.VolumeMounts = baseFirst(c.VolumeMounts, b.VolumeMounts, func(m corev1.VolumeMount) string { return m.MountPath })
			c.Ports = baseFirst(c.Ports, b.Ports, func(p corev1.ContainerPort) string { return strconv.Itoa(int(p.ContainerPort)) })
		}
	}
}

// baseFirst orders merged (a list merged by key) as base, then the other items
// in their order in merged.
func baseFirst[T any](merged, base []T, key func(T) string) []T {
	if len(merged) == 0 {
		return merged
	}
	rank := make(map[string]int, len(base))
	for i, b := range base {
		rank[key(b)] = i
	}
	pos := func(t T) int {
		if i, ok := rank[key(t)]; ok {
			return i
		}
		return len(base)
	}
	slices.SortStableFunc(merged, func(a, b T) int { return pos(a) - pos(b) })
	return merged
}

// patchBytes encodes a typed pod spec as a patch. Fields without omitempty
// (podSpec.containers) encode as null when unset, which in a merge patch means
// "delete": a typed spec cannot mean that, so nulls are dropped.
func patchBytes(spec *corev1.PodSpec) ([]byte, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encode spec.podTemplate.spec: %w", err)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("decode spec.podTemplate.spec: %w", err)
	}
	return json.Marshal(dropNulls(v))
}

// dropNulls removes null members from the objects in v, recursively.
func dropNulls(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if e == nil {
				delete(t, k)
				continue
			}
			t[k] = dropNulls(e)
		}
	case []any:
		for i, e := range t {
			t[i] = dropNulls(e)
		}
	}
	return v
}

// checkMergeKeys reports list items of the patch that cannot be merged because
// they lack their merge key, with a clearer message than the patch library's.
func checkMergeKeys(spec *corev1.PodSpec) error {
	var errs []error
	containers := func(field string, cs []corev1.Container) {
		for i, c := range cs {
			if c.Name == "" {
				errs = append(errs, fmt.Errorf("%s[%d] has no name (containers merge by name; %q is the workspace container)", field, i, ContainerName))
			}
			for j, m := range c.VolumeMounts {
				if m.MountPath == "" {
					errs = append(errs, fmt.Errorf("%s[%d].volumeMounts[%d] has no mountPath", field, i, j))
				}
			}
			for j, e := range c.Env {
				if e.Name == "" {
					errs = append(errs, fmt.Errorf("%s[%d].env[%d] has no name", field, i, j))
				}
			}
		}
	}
	containers("containers", spec.Containers)
	containers("initContainers", spec.InitContainers)
	for i, v := range spec.Volumes {
		if v.Name == "" {
			errs = append(errs, fmt.Errorf("volumes[%d] has no name", i))
		}
	}
	return errors.Join(errs...)
}

// checkMerged reports mistakes the merged spec makes obvious: a container
// added without an image, a mount of a volume that is not defined.
func checkMerged(spec *corev1.PodSpec) error {
	volumes := map[string]bool{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = true
	}
	var errs []error
	check := func(kind string, cs []corev1.Container) {
		for _, c := range cs {
			if c.Image == "" {
				errs = append(errs, fmt.Errorf("%s %q has no image", kind, c.Name))
			}
			for _, m := range c.VolumeMounts {
				if !volumes[m.Name] {
					errs = append(errs, fmt.Errorf("%s %q mounts volume %q, which volumes does not define", kind, c.Name, m.Name))
				}
			}
		}
	}
	check("container", spec.Containers)
	check("init container", spec.InitContainers)
	return errors.Join(errs...)
}
