package pod

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/gitremote"
)

// Labels and annotations set on the objects Build returns.
const (
	// LabelName is app.kubernetes.io/name, always LabelNameValue.
	LabelName = "app.kubernetes.io/name"
	// LabelNameValue is the value of LabelName.
	LabelNameValue = "stackflow-workspace"
	// LabelManagedBy is app.kubernetes.io/managed-by, always LabelManagedByValue.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelManagedByValue is the value of LabelManagedBy.
	LabelManagedByValue = "stackflow"
	// LabelWorkspaceName holds the Workspace's name; the StatefulSet and the
	// Service select their pod on it (the label PKO uses).
	LabelWorkspaceName = "auto.pulumi.com/workspace-name"
	// AnnotationPodSpecHash is set on the pod template to SpecHash of the
	// StatefulSet: the controller updates the StatefulSet when it differs.
	AnnotationPodSpecHash = "stackflow.io/pod-spec-hash"
)

// Names inside the pod template.
const (
	// ContainerName is the workspace container, running the agent in the Pulumi
	// image. spec.podTemplate merges a container of this name into it.
	ContainerName = "pulumi"
	// BootstrapContainerName is the init container copying the agent binary
	// into the share volume.
	BootstrapContainerName = "bootstrap"
	// PortName names the agent's gRPC port on the container and the Service.
	PortName = "grpc"
	// DefaultPort is the agent's gRPC port when Options.Port is 0.
	DefaultPort int32 = 50051
	// TokenEnvVar is the environment variable holding the agent's bearer token.
	TokenEnvVar = "STACKFLOW_AGENT_TOKEN"
	// TokenSecretKey is the key of Options.TokenSecretName holding the token.
	TokenSecretKey = "token"
	// ShareDir is where the share emptyDir (agent binary, program, Pulumi home)
	// is mounted in both containers.
	ShareDir = "/share"
	// WorkDir is the agent's working directory, where it fetches the program.
	WorkDir = ShareDir + "/workspace"
)

const (
	shareVolume = "share"
	tmpVolume   = "tmp"

	// maxWorkspaceNameLength keeps the StatefulSet name (name + "-workspace")
	// within 52 characters, so the controller-revision-hash label the
	// StatefulSet controller puts on the pod ("<statefulset>-<hash of up to 10
	// characters>") stays a valid 63-character label value. It is why PKO limits
	// Stack names to 42 characters.
	maxWorkspaceNameLength = 42

	// terminationGracePeriod lets a running Pulumi operation finish or cancel
	// cleanly (and write its checkpoint) when the pod is stopped.
	terminationGracePeriod int64 = 300
)

// Options are the operator-wide settings of the pod runtime.
type Options struct {
	// AgentImage is the image holding the agent binary at /agent (the operator
	// image). Required.
	AgentImage string
	// DefaultPulumiImage is the workspace image when spec.image is empty, e.g.
	// "pulumi/pulumi:3.274.1-nonroot".
	DefaultPulumiImage string
	// Port is the agent's gRPC port; 0 means DefaultPort.
	Port int32
	// AgentAuth is how the operator authenticates to workspace agents:
	// AgentAuthToken (default) or AgentAuthKube.
	AgentAuth AgentAuth
	// KubeAudience is the audience of the operator's ServiceAccount tokens the
	// agent accepts under AgentAuthKube; default DefaultKubeAudience.
	KubeAudience string
	// TokenSecretName is the Secret holding the agent's bearer token under key
	// TokenSecretKey, given to the agent as TokenEnvVar. Required with
	// AgentAuthToken, unused with AgentAuthKube.
	TokenSecretName string
	// DefaultServiceAccount is the workspace pod's ServiceAccount when the
	// Workspace names none; default "default" (lockdown mode sets one with
	// no permissions beyond what the platform team grants it).
	DefaultServiceAccount string
	// ExtraArgs are appended to the agent's arguments.
	ExtraArgs []string
	// AddressByPodIP makes the runtime reach the agent at its pod's IP rather
	// than at Address (the headless Service's DNS name), for an operator that
	// does not use the cluster's DNS: one running on a node's host, as the
	// single-node test cluster's tests do (there is no cluster DNS there).
	AddressByPodIP bool
	// EnvFromSecretKeys are, per Workspace, the keys of the Secrets the
	// workspace container's envFrom names (Secret name → keys), read by the
	// runtime: the variables they become are listed in SecretEnvNamesVar so
	// the agent redacts their values. A key set that changes rolls the pod,
	// as the variables themselves change only when the pod restarts.
	EnvFromSecretKeys map[string][]string
	// SSHKnownHosts holds the operator's known_hosts lines
	// (--ssh-known-hosts), given to agents that clone with an SSH key and
	// no knownHosts of their own.
	SSHKnownHosts string
	// AgentSettings are the operator's settings every agent gets as flags.
	AgentSettings
}

// AgentSettings are the operator's settings that reach every agent, of
// either runtime, as flags of its command line.
type AgentSettings struct {
	// PrepareTimeout, when positive, is the agents' --prepare-timeout
	// (else the agent's default).
	PrepareTimeout time.Duration
	// GitLimits are the agents' --git-idle-timeout and --git-max-fetch-bytes
	// (gitremote.Limits.AgentArgs).
	GitLimits gitremote.Limits
	// GitHubAPIHosts are the agents' --github-api-hosts: the hosts besides
	// GitHub.com's API a GitHub App's apiURL may name.
	GitHubAPIHosts []string
}

// Args are the agent flags for the settings made: none for a setting left
// at the agent's default, so that an operator at its defaults gives agents
// the command line it always gave them, and rolls no workspace pod.
func (a AgentSettings) Args() []string {
	var args []string
	if a.PrepareTimeout > 0 {
		args = append(args, "--prepare-timeout="+a.PrepareTimeout.String())
	}
	args = append(args, a.GitLimits.AgentArgs()...)
	if len(a.GitHubAPIHosts) > 0 {
		args = append(args, "--github-api-hosts="+strings.Join(a.GitHubAPIHosts, ","))
	}
	return args
}

// AgentAuth is how the operator authenticates to a workspace agent.
type AgentAuth string

const (
	// AgentAuthToken: a random bearer token per Workspace, kept in the
	// Secret TokenSecretName (created by the operator, owned by the
	// Workspace, so a recreated Workspace gets a new one).
	AgentAuthToken AgentAuth = "token"
	// AgentAuthKube: the operator presents its own ServiceAccount token
	// (audience KubeAudience, short-lived and rotated by the kubelet); the
	// agent verifies it with a TokenReview and checks with a
	// SubjectAccessReview that its subject may "use" workspaces/rpc of this
	// Workspace. The workspace's ServiceAccount needs the
	// system:auth-delegator ClusterRole for those reviews.
	AgentAuthKube AgentAuth = "kube"
)

// DefaultKubeAudience is the token audience agents accept under AgentAuthKube.
const DefaultKubeAudience = "stackflow-agent"

// kubeAudience returns the audience, defaulted.
func (o Options) kubeAudience() string {
	if o.KubeAudience == "" {
		return DefaultKubeAudience
	}
	return o.KubeAudience
}

// port returns the agent port, defaulted.
func (o Options) port() int32 {
	if o.Port == 0 {
		return DefaultPort
	}
	return o.Port
}

// validate reports operator misconfiguration.
func (o Options) validate() error {
	var errs []error
	if o.AgentImage == "" {
		errs = append(errs, errors.New("AgentImage is required"))
	}
	switch o.AgentAuth {
	case AgentAuthToken, "":
		if o.TokenSecretName == "" {
			errs = append(errs, errors.New("TokenSecretName is required (the agent runs with --auth=token)"))
		}
	case AgentAuthKube:
	default:
		errs = append(errs, fmt.Errorf("agent auth %q is not one of %q, %q", o.AgentAuth, AgentAuthToken, AgentAuthKube))
	}
	if p := o.port(); p < 1 || p > 65535 {
		errs = append(errs, fmt.Errorf("port %d is out of range 1-65535", p))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pod runtime options: %w", err)
	}
	return nil
}

// Name is the name of the StatefulSet and Service of the Workspace
// workspaceName: "<workspaceName>-workspace".
func Name(workspaceName string) string { return workspaceName + "-workspace" }

// PodName is the name of the Workspace's pod, the StatefulSet's only one:
// "<workspaceName>-workspace-0".
func PodName(workspaceName string) string { return Name(workspaceName) + "-0" }

// Address is where the Workspace's agent answers: the DNS name of the
// StatefulSet's only pod behind the headless Service,
// "<name>-workspace-0.<name>-workspace.<namespace>:<port>". Port 0 means
// DefaultPort. The name resolves only while the pod is ready (the Service does
// not publish unready addresses).
func Address(ws *autov1alpha1.Workspace, port int32) string {
	if port == 0 {
		port = DefaultPort
	}
	name := Name(ws.Name)
	host := name + "-0." + name + "." + ws.Namespace
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// Labels are the labels Build puts on the StatefulSet, the Service and the pod
// of the Workspace workspaceName.
func Labels(workspaceName string) map[string]string {
	return map[string]string{
		LabelName:          LabelNameValue,
		LabelManagedBy:     LabelManagedByValue,
		LabelWorkspaceName: workspaceName,
	}
}

// SelectorLabels are the labels the StatefulSet and the Service select the pod
// of the Workspace workspaceName on.
func SelectorLabels(workspaceName string) map[string]string {
	return map[string]string{LabelWorkspaceName: workspaceName}
}

// Build returns the StatefulSet and the headless Service running ws in a pod.
// The pod template carries AnnotationPodSpecHash. spec.stacks does not
// influence either object. The error names what in ws (or opts) is wrong; it
// does not change until ws (or opts) does.
func Build(ws *autov1alpha1.Workspace, opts Options) (*appsv1.StatefulSet, *corev1.Service, error) {
	if err := opts.validate(); err != nil {
		return nil, nil, err
	}
	if err := validateName(ws); err != nil {
		return nil, nil, err
	}
	tmpl, err := podTemplate(ws, opts)
	if err != nil {
		return nil, nil, err
	}
	sts := statefulSet(ws, tmpl)
	sts.Spec.Template.Annotations[AnnotationPodSpecHash] = SpecHash(sts)

	svc, err := service(ws, opts.port())
	if err != nil {
		return nil, nil, err
	}
	return sts, svc, nil
}

// validateName checks that the Workspace's name makes valid object names.
func validateName(ws *autov1alpha1.Workspace) error {
	if ws.Name == "" {
		return errors.New("workspace has no name")
	}
	if ws.Namespace == "" {
		return fmt.Errorf("workspace %q has no namespace", ws.Name)
	}
	if len(ws.Name) > maxWorkspaceNameLength {
		return fmt.Errorf("workspace name %q is %d characters long: at most %d fit the names of its StatefulSet and pod",
			ws.Name, len(ws.Name), maxWorkspaceNameLength)
	}
	// The Service name must be a DNS-1035 label (no dots), stricter than the
	// DNS subdomain a Workspace name may be.
	if msgs := validation.IsDNS1035Label(Name(ws.Name)); len(msgs) > 0 {
		return fmt.Errorf("workspace name %q cannot name a Service: %s", ws.Name, strings.Join(msgs, "; "))
	}
	return nil
}

// statefulSet wraps the pod template in the Workspace's StatefulSet.
func statefulSet(ws *autov1alpha1.Workspace, tmpl corev1.PodTemplateSpec) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		TypeMeta: metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      Name(ws.Name),
			Namespace: ws.Namespace,
			Labels:    Labels(ws.Name),
		},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    new(int32(1)),
			ServiceName: Name(ws.Name),
			// Parallel: a replacement pod is started without waiting for ordered
			// startup/teardown, which one replica gains nothing from.
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: SelectorLabels(ws.Name)},
			Template:            tmpl,
		},
	}
}

// service is the Workspace's headless Service.
func service(ws *autov1alpha1.Workspace, port int32) (*corev1.Service, error) {
	labels := Labels(ws.Name)
	var annotations map[string]string
	if st := ws.Spec.ServiceTemplate; st != nil {
		if err := mergeLabels(labels, st.Metadata.Labels); err != nil {
			return nil, fmt.Errorf("spec.serviceTemplate.metadata.labels: %w", err)
		}
		annotations = maps.Clone(st.Metadata.Annotations)
	}
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: corev1.SchemeGroupVersion.String(), Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        Name(ws.Name),
			Namespace:   ws.Namespace,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: corev1.ClusterIPNone,
			Selector:  SelectorLabels(ws.Name),
			Ports: []corev1.ServicePort{{
				Name:       PortName,
				Protocol:   corev1.ProtocolTCP,
				Port:       port,
				TargetPort: intstr.FromString(PortName),
			}},
			// Only a ready agent (source fetched, dependencies installed) gets a
			// DNS record, so Address does not resolve before it can serve.
			PublishNotReadyAddresses: false,
		},
	}, nil
}

// mergeLabels adds extra to labels; a key Build sets itself may only be given
// its own value, since the selectors depend on it.
func mergeLabels(labels, extra map[string]string) error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		v := extra[k]
		if own, ok := labels[k]; ok && own != v {
			errs = append(errs, fmt.Errorf("label %s is set by the operator to %q and cannot be %q", k, own, v))
			continue
		}
		labels[k] = v
	}
	return errors.Join(errs...)
}
