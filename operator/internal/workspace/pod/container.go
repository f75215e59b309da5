package pod

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
)

// Probe timing. No liveness probe: restarting the container would kill a
// running Pulumi operation and leave its stack locked with pending operations.
const (
	probePeriodSeconds  = 10
	probeTimeoutSeconds = 5
	// startupFailureThreshold gives the agent 20 minutes to fetch the source
	// and run `pulumi install` (large node or python programs take minutes)
	// before the kubelet restarts it.
	startupFailureThreshold = 120
)

// defaultRequests are the requests of the workspace container that the user
// did not set. Without an ephemeral-storage request, a pod writing plugins
// and dependencies to its emptyDirs is the first to be evicted under disk
// pressure (PKO issue #1308).
var defaultRequests = corev1.ResourceList{
	corev1.ResourceCPU:              resource.MustParse("500m"),
	corev1.ResourceMemory:           resource.MustParse("512Mi"),
	corev1.ResourceEphemeralStorage: resource.MustParse("1Gi"),
}

// bootstrapRequests keep the init container schedulable under quotas that
// require requests; copying one file needs little.
var bootstrapRequests = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("100m"),
	corev1.ResourceMemory: resource.MustParse("64Mi"),
}

// bootstrapContainer copies the agent binary from the operator image into the
// share volume, so that it runs in any Pulumi image.
func bootstrapContainer(opts Options, sc *corev1.SecurityContext) corev1.Container {
	return corev1.Container{
		Name:            BootstrapContainerName,
		Image:           opts.AgentImage,
		Command:         []string{"/agent", "install", ShareDir + "/agent"},
		Resources:       corev1.ResourceRequirements{Requests: bootstrapRequests.DeepCopy()},
		VolumeMounts:    []corev1.VolumeMount{{Name: shareVolume, MountPath: ShareDir}},
		SecurityContext: sc,
		// Its last log lines become the termination message when it fails, so
		// the Workspace can say why.
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// workspaceContainer runs the agent in the Pulumi image.
func workspaceContainer(ws *autov1alpha1.Workspace, opts Options, sc *corev1.SecurityContext) (corev1.Container, error) {
	image := ws.Spec.Image
	if image == "" {
		image = opts.DefaultPulumiImage
	}
	if image == "" {
		return corev1.Container{}, errors.New("spec.image is empty and the operator has no default Pulumi image")
	}
	args, err := agentArgs(ws, opts)
	if err != nil {
		return corev1.Container{}, err
	}
	env, err := containerEnv(ws, opts)
	if err != nil {
		return corev1.Container{}, err
	}
	grpc := &corev1.GRPCAction{Port: opts.port()}
	return corev1.Container{
		Name:            ContainerName,
		Image:           image,
		ImagePullPolicy: ws.Spec.ImagePullPolicy,
		Command:         []string{ShareDir + "/agent", "serve"},
		Args:            args,
		Env:             env,
		EnvFrom:         deepCopyEnvFrom(ws.Spec.EnvFrom),
		Ports: []corev1.ContainerPort{{
			Name:          PortName,
			ContainerPort: opts.port(),
			Protocol:      corev1.ProtocolTCP,
		}},
		Resources: resources(ws.Spec.Resources),
		VolumeMounts: []corev1.VolumeMount{
			{Name: shareVolume, MountPath: ShareDir},
			{Name: tmpVolume, MountPath: "/tmp"},
		},
		// The agent reports grpc.health.v1 SERVING once the program is fetched
		// and its dependencies installed.
		StartupProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{GRPC: grpc},
			PeriodSeconds:    probePeriodSeconds,
			TimeoutSeconds:   probeTimeoutSeconds,
			FailureThreshold: startupFailureThreshold,
		},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{GRPC: grpc.DeepCopy()},
			PeriodSeconds:    probePeriodSeconds,
			TimeoutSeconds:   probeTimeoutSeconds,
			FailureThreshold: 3,
		},
		SecurityContext: sc,
		// The agent writes one classified line (SourceUnavailable: …,
		// InstallationFailed: …) to /dev/termination-log when it cannot prepare
		// the program; any other failure leaves the tail of its log there.
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}, nil
}

// agentArgs are the arguments of `agent serve`.
func agentArgs(ws *autov1alpha1.Workspace, opts Options) ([]string, error) {
	args := []string{
		"--workdir=" + WorkDir,
		"--listen=:" + strconv.Itoa(int(opts.port())),
	}
	if opts.AgentAuth == AgentAuthKube {
		args = append(args, "--auth=kube", "--kube-audience="+opts.kubeAudience(),
			"--kube-workspace="+ws.Namespace+"/"+ws.Name)
	} else {
		args = append(args, "--auth=token")
	}
	src, err := sourceArgs(&ws.Spec)
	if err != nil {
		return nil, err
	}
	args = append(args, src...)
	if v := ws.Spec.PulumiLogVerbosity; v > 0 {
		args = append(args, "--pulumi-log-level="+strconv.FormatUint(uint64(v), 10))
	}
	args = append(args, opts.AgentSettings.Args()...)
	return append(args, opts.ExtraArgs...), nil
}

// sourceArgs are the agent flags fetching the program. No source is allowed:
// the program may be baked into the image at the working directory.
func sourceArgs(spec *autov1alpha1.WorkspaceSpec) ([]string, error) {
	n := 0
	for _, set := range []bool{spec.Git != nil, spec.Flux != nil, spec.Local != nil} {
		if set {
			n++
		}
	}
	if n > 1 {
		return nil, errors.New("set at most one program source among spec.git, spec.flux and spec.local")
	}
	var args []string
	switch {
	case spec.Git != nil:
		g := spec.Git
		if g.URL == "" {
			return nil, errors.New("spec.git.url is required")
		}
		if g.Ref == "" {
			return nil, errors.New("spec.git.ref is required")
		}
		args = append(args, "--git-url="+g.URL, "--git-ref="+g.Ref)
		if g.Dir != "" {
			args = append(args, "--dir="+g.Dir)
		}
		if g.Shallow {
			args = append(args, "--git-shallow")
		}
	case spec.Flux != nil:
		f := spec.Flux
		if f.Url == "" {
			return nil, errors.New("spec.flux.url is required")
		}
		if f.Digest == "" {
			return nil, errors.New("spec.flux.digest is required")
		}
		args = append(args, "--artifact-url="+f.Url, "--artifact-digest="+f.Digest)
		if f.Dir != "" {
			args = append(args, "--dir="+f.Dir)
		}
	case spec.Local != nil:
		if spec.Local.Dir == "" {
			return nil, errors.New("spec.local.dir is required")
		}
		args = append(args, "--local-dir="+spec.Local.Dir)
	}
	return args, nil
}

// containerEnv is the workspace container's environment: the agent token, the
// Pulumi and home directories in the share volume, the git credentials, then
// spec.env. A variable in spec.env replaces the operator's of the same name,
// except the agent token.
// SecretEnvNamesVar is the agent's environment variable listing
// (comma-separated) the names of the variables a runtime set from Secrets, so
// that the agent redacts their values too (agent.SecretEnvNamesEnv: the agent
// would otherwise know only its fixed --secret-env list and git credentials).
const SecretEnvNamesVar = "STACKFLOW_SECRET_ENV"

func containerEnv(ws *autov1alpha1.Workspace, opts Options) ([]corev1.EnvVar, error) {
	var env []corev1.EnvVar
	if opts.AgentAuth != AgentAuthKube {
		env = append(env, secretEnv(TokenEnvVar, &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: opts.TokenSecretName},
			Key:                  TokenSecretKey,
		}))
	}
	env = append(env,
		// The root filesystem may be read-only: everything Pulumi and language
		// tools write goes to the share volume.
		corev1.EnvVar{Name: "PULUMI_HOME", Value: ShareDir + "/.pulumi"},
		corev1.EnvVar{Name: "HOME", Value: ShareDir + "/home"},
		corev1.EnvVar{Name: "PULUMI_SKIP_UPDATE_CHECK", Value: "true"},
	)
	if ws.Spec.Git != nil && ws.Spec.Git.Auth != nil {
		git, err := gitauth.PodEnv(ws.Spec.Git.Auth, opts.SSHKnownHosts)
		if err != nil {
			return nil, err
		}
		env = append(env, git...)
	}
	for _, e := range ws.Spec.Env {
		if e.Name == TokenEnvVar {
			return nil, fmt.Errorf("spec.env: %s is reserved for the agent's token", TokenEnvVar)
		}
		// Replace rather than append, so the pod never holds two definitions
		// of a name (the API server warns, and tools disagree on which wins).
		env = slices.DeleteFunc(env, func(o corev1.EnvVar) bool { return o.Name == e.Name })
	}
	var secretNames []string
	for _, e := range ws.Spec.Env {
		env = append(env, *e.DeepCopy())
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			secretNames = append(secretNames, e.Name)
		}
	}
	if len(secretNames) > 0 {
		// The agent redacts these variables' values in what it reports and
		// logs (and those of envFrom Secrets: listEnvFromSecrets).
		slices.Sort(secretNames)
		env = append(env, corev1.EnvVar{Name: SecretEnvNamesVar, Value: strings.Join(secretNames, ",")})
	}
	return env, nil
}

// secretEnv is a variable read from a Secret key.
func secretEnv(name string, sel *corev1.SecretKeySelector) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: sel.DeepCopy()}}
}

// resources are spec.resources with each missing request defaulted. A
// resource with a limit but no request is left alone: Kubernetes then requests
// the limit, and a default above a smaller limit would be invalid.
func resources(spec corev1.ResourceRequirements) corev1.ResourceRequirements {
	out := *spec.DeepCopy()
	for name, q := range defaultRequests {
		if _, ok := out.Requests[name]; ok {
			continue
		}
		if _, ok := out.Limits[name]; ok {
			continue
		}
		if out.Requests == nil {
			out.Requests = corev1.ResourceList{}
		}
		out.Requests[name] = q.DeepCopy()
	}
	return out
}

// deepCopyEnvFrom copies in, so the pod shares no memory with the Workspace.
func deepCopyEnvFrom(in []corev1.EnvFromSource) []corev1.EnvFromSource {
	if in == nil {
		return nil
	}
	out := make([]corev1.EnvFromSource, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}
