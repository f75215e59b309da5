package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Workspace condition types.
const (
	// WorkspaceReady is True when the workspace agent is running, has its program
	// source and dependencies installed, and answers on status.address.
	WorkspaceReady = "Ready"
	// WorkspaceStalled is True while the Workspace cannot become ready until its
	// spec or a referenced object changes.
	WorkspaceStalled = "Stalled"
)

// Workspace condition reasons.
const (
	// WorkspaceReasonInitializing: the workspace is being created or its agent is
	// fetching the source and installing dependencies.
	WorkspaceReasonInitializing = "Initializing"
	// WorkspaceReasonRunning: the agent is ready and serving.
	WorkspaceReasonRunning = "Running"
	// WorkspaceReasonInstallationFailed: fetching the source or installing
	// dependencies failed.
	WorkspaceReasonInstallationFailed = "InstallationFailed"
	// WorkspaceReasonConnectionFailed: the agent cannot be reached.
	WorkspaceReasonConnectionFailed = "ConnectionFailed"
	// WorkspaceReasonSpecInvalid: the spec cannot be acted on as written.
	WorkspaceReasonSpecInvalid = "SpecInvalid"
	// WorkspaceReasonDeleting: the workspace is being torn down.
	WorkspaceReasonDeleting = "Deleting"
	// WorkspaceReasonSourceUnavailable: the agent found the program source
	// missing or refused (commit, branch or repository not found,
	// authentication refused, artifact not found or not matching its digest).
	WorkspaceReasonSourceUnavailable = "SourceUnavailable"
	// WorkspaceReasonCheckoutFailed: the running agent could not check out
	// the spec's new source revision in place, for a reason that may pass (a
	// network error); the operator asks again shortly. Its previous
	// revision stays in place meanwhile.
	WorkspaceReasonCheckoutFailed = "CheckoutFailed"
	// WorkspaceReasonImagePullFailed: the kubelet cannot pull a workspace
	// container's image (ErrImagePull, ImagePullBackOff, InvalidImageName…).
	WorkspaceReasonImagePullFailed = "ImagePullFailed"
	// WorkspaceReasonContainerConfigInvalid: the kubelet cannot create a
	// workspace container from its configuration (CreateContainerConfigError,
	// such as a missing Secret or ConfigMap key, or CreateContainerError).
	WorkspaceReasonContainerConfigInvalid = "ContainerConfigInvalid"
	// WorkspaceReasonCrashLooping: a workspace container keeps exiting (Error,
	// OOMKilled…) and the kubelet restarts it (CrashLoopBackOff).
	WorkspaceReasonCrashLooping = "CrashLooping"
	// WorkspaceReasonUnschedulable: the scheduler finds no node for the
	// workspace pod.
	WorkspaceReasonUnschedulable = "Unschedulable"
	// WorkspaceReasonPodFailed: the workspace pod failed as a whole (evicted,
	// for instance); its StatefulSet replaces it.
	WorkspaceReasonPodFailed = "PodFailed"
	// WorkspaceReasonPodSecurityForbidden: the operator's lockdown mode
	// (--pod-security-enforcement) refused the workspace pod, which asks for
	// privileges the namespace's Pod Security level forbids.
	WorkspaceReasonPodSecurityForbidden = "PodSecurityForbidden"
	// WorkspaceReasonConfigurationFailed: the agent could not select or
	// create a stack, or set its configuration. Stalled at once when the
	// configuration is invalid or the stack missing with create off; when
	// the failure may pass (a lock, the backend), once it has lasted
	// (status.configurationFailure), and still retried.
	WorkspaceReasonConfigurationFailed = "ConfigurationFailed"
)

// SecurityProfile selects the Pod Security Standard the workspace pod is built to.
// +enum
// +kubebuilder:validation:Enum=baseline;restricted
type SecurityProfile string

const (
	// SecurityProfileBaseline runs the workspace under the baseline Pod Security
	// Standard (root allowed), for Pulumi images that need it.
	SecurityProfileBaseline SecurityProfile = "baseline"
	// SecurityProfileRestricted runs the workspace under the restricted Pod Security
	// Standard: non-root, no privilege escalation, all capabilities dropped,
	// RuntimeDefault seccomp. This is the default.
	SecurityProfileRestricted SecurityProfile = "restricted"
)

// WorkspaceSpec describes the environment in which Pulumi runs for one Stack.
// +kubebuilder:validation:XValidation:rule="(has(self.git) ? 1 : 0) + (has(self.flux) ? 1 : 0) + (has(self.local) ? 1 : 0) <= 1",message="set at most one program source among spec.git, spec.flux and spec.local"
type WorkspaceSpec struct {
	// serviceAccountName is the Kubernetes service account the workspace pod runs
	// as. Empty means "default".
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// securityProfile is the Pod Security Standard the workspace pod is built to:
	// "restricted" (the default) or "baseline".
	// +optional
	SecurityProfile SecurityProfile `json:"securityProfile,omitempty"`

	// image is the container image that provides the Pulumi CLI and language
	// runtimes for the program. Empty means the operator's default Pulumi image.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Image string `json:"image,omitempty"`

	// imagePullPolicy is the pull policy for image: Always, Never or IfNotPresent.
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// git fetches the Pulumi program from a git repository.
	// +optional
	Git *GitSource `json:"git,omitempty"`

	// flux fetches the Pulumi program from a Flux source artifact (or any tarball
	// URL with a digest, such as a Program artifact).
	// +optional
	Flux *FluxSource `json:"flux,omitempty"`

	// local uses a Pulumi program already present in the workspace image.
	// +optional
	Local *LocalSource `json:"local,omitempty"`

	// projectInfo names the Pulumi project and runtime when they cannot be read
	// from the program source ahead of time.
	// +optional
	ProjectInfo *ProjectInfoSource `json:"projectInfo,omitempty"`

	// envFrom lists sources (ConfigMaps, Secrets) of environment variables for the
	// Pulumi process.
	// +optional
	// +listType=atomic
	EnvFrom []corev1.EnvFromSource `json:"envFrom,omitempty"`

	// env lists environment variables for the Pulumi process.
	// +optional
	// +patchMergeKey=name
	// +patchStrategy=merge
	// +listType=map
	// +listMapKey=name
	Env []corev1.EnvVar `json:"env,omitempty" patchStrategy:"merge" patchMergeKey:"name"`

	// resources are the compute resources of the workspace container. Requests for
	// cpu, memory and ephemeral-storage are defaulted when not set.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// podTemplate is merged (strategic merge patch) over the generated workspace
	// pod template, to add volumes, sidecars, tolerations, node selectors, etc.
	// +optional
	PodTemplate *EmbeddedPodTemplateSpec `json:"podTemplate,omitempty"`

	// serviceTemplate adds labels and annotations to the workspace's Service.
	// +optional
	ServiceTemplate *EmbeddedServiceTemplateSpec `json:"serviceTemplate,omitempty"`

	// pulumiLogLevel is the Pulumi engine's log verbosity (pulumi -v). 0 disables
	// verbose engine logging.
	// +optional
	// +kubebuilder:validation:Maximum=11
	PulumiLogVerbosity uint32 `json:"pulumiLogLevel,omitempty"`

	// stacks lists the Pulumi stacks to prepare in the workspace, with their
	// configuration and ESC environments.
	// +optional
	// +patchMergeKey=name
	// +patchStrategy=merge
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Stacks []WorkspaceStack `json:"stacks,omitempty"`
}

// GitSource is a git repository holding the Pulumi program.
type GitSource struct {
	// url is the repository to clone (https://, ssh://, git@host:path or file://).
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url,omitempty"`

	// ref is the commit SHA (or other git reference) to check out. A new
	// ref alone is checked out in place by the running agent: no new pod
	// or process.
	// +kubebuilder:validation:MaxLength=256
	Ref string `json:"ref,omitempty"`

	// dir is the directory within the repository that holds Pulumi.yaml.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Dir string `json:"dir,omitempty"`

	// auth holds the credentials used to clone the repository.
	// +optional
	Auth *GitAuth `json:"auth,omitempty"`

	// shallow fetches only the requested commit instead of the full history.
	// +optional
	Shallow bool `json:"shallow,omitempty"`
}

// GitAuth selects the git credentials, each read from a Secret key: a token, an
// SSH private key (with optional password), a username and password, or a GitHub
// App.
type GitAuth struct {
	// sshPrivateKey is the PEM-encoded SSH private key.
	// +optional
	SSHPrivateKey *corev1.SecretKeySelector `json:"sshPrivateKey,omitempty"`

	// username is the basic-auth user name.
	// +optional
	Username *corev1.SecretKeySelector `json:"username,omitempty"`

	// password is the basic-auth password, or the SSH private key's password.
	// +optional
	Password *corev1.SecretKeySelector `json:"password,omitempty"`

	// token is a personal access token, sent as the basic-auth password.
	// +optional
	Token *corev1.SecretKeySelector `json:"token,omitempty"`

	// knownHosts holds known_hosts lines (OpenSSH format, e.g. the output of
	// `ssh-keyscan <host>`) that the SSH server's host key must match. When
	// unset, the operator's --ssh-known-hosts file is used; with neither,
	// SSH fails: host keys are never accepted unverified.
	// +optional
	KnownHosts *corev1.SecretKeySelector `json:"knownHosts,omitempty"`

	// githubApp authenticates as a GitHub App installation.
	// +optional
	GitHubApp *GitHubAppAuth `json:"githubApp,omitempty"`
}

// GitHubAppAuth holds a GitHub App's credentials.
type GitHubAppAuth struct {
	// appID is the GitHub App's numeric ID.
	AppID *corev1.SecretKeySelector `json:"appID"`
	// installationID is the App installation's numeric ID.
	InstallationID *corev1.SecretKeySelector `json:"installationID"`
	// privateKey is the App's PEM-encoded private key.
	PrivateKey *corev1.SecretKeySelector `json:"privateKey"`
	// apiURL is the GitHub REST API the installation token is requested
	// from: https://api.github.com by default; for GitHub Enterprise Server
	// https://<host>/api/v3. It must be https, name a host (and optionally a
	// port), have an empty path or one ending in /api/v3, and carry no user
	// info, query or fragment.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https://[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?([.][A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*(:[0-9]{1,5})?((/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)*/api/v3)?/?$')",message="githubApp.apiURL must be https://<host>[:<port>] with an empty path or a path ending in /api/v3 (GitHub Enterprise Server), and no user info, query or fragment"
	APIURL string `json:"apiURL,omitempty"`
}

// FluxSource is a tarball artifact (as published by Flux sources or by Program
// objects) holding the Pulumi program.
type FluxSource struct {
	// url is the artifact's HTTP(S) address.
	// +kubebuilder:validation:MaxLength=2048
	Url string `json:"url,omitempty"`

	// digest is the artifact's digest, "sha256:<hex>"; the download is rejected
	// when it does not match. A new url and digest alone are checked out in
	// place by the running agent: no new pod or process.
	// +kubebuilder:validation:MaxLength=256
	Digest string `json:"digest,omitempty"`

	// dir is the directory within the artifact that holds Pulumi.yaml.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Dir string `json:"dir,omitempty"`
}

// LocalSource is a program already present in the workspace's filesystem.
type LocalSource struct {
	// dir is the absolute directory holding Pulumi.yaml.
	// +kubebuilder:validation:MaxLength=1024
	Dir string `json:"dir,omitempty"`
}

// ProjectInfoSource names a Pulumi project.
type ProjectInfoSource struct {
	// name is the Pulumi project name.
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`
	// runtime is the Pulumi project runtime (yaml, go, nodejs, python, …).
	// +kubebuilder:validation:MaxLength=64
	Runtime string `json:"runtime"`
}

// WorkspaceStack is a Pulumi stack to select (or create) in the workspace.
type WorkspaceStack struct {
	// name is the fully qualified stack name ([org/][project/]stack).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Name string `json:"name"`

	// create creates the stack when it does not exist. Default true.
	// +optional
	Create *bool `json:"create,omitempty"`

	// secretsProvider is the secrets provider for a newly created stack
	// (e.g. "passphrase", "awskms://…").
	// +optional
	SecretsProvider *string `json:"secretsProvider,omitempty"`

	// config lists configuration values set on the stack before each operation.
	// +optional
	// +patchMergeKey=key
	// +patchStrategy=merge
	// +listType=map
	// +listMapKey=key
	// +kubebuilder:validation:MaxItems=1024
	Config []ConfigItem `json:"config,omitempty"`

	// environment lists Pulumi ESC environments imported into the stack.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Environment []string `json:"environment,omitempty"`
}

// ConfigItem is one stack configuration value, given inline or read from the
// workspace's environment or filesystem.
// +structType=atomic
type ConfigItem struct {
	// key is the configuration key, e.g. "aws:region" or "app:settings.replicas".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Key string `json:"key"`

	// path treats key as a property path into a structured value
	// (pulumi config set --path).
	// +optional
	Path *bool `json:"path,omitempty"`

	// value is the configuration value: any JSON value (string, number, boolean,
	// object, array).
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	Value *apiextensionsv1.JSON `json:"value,omitempty"`

	// valueFrom reads the value from an environment variable or a file in the
	// workspace.
	// +optional
	ValueFrom *ConfigValueFrom `json:"valueFrom,omitempty"`

	// secret stores the value encrypted, as a Pulumi secret.
	// +optional
	Secret *bool `json:"secret,omitempty"`
}

// ConfigValueFrom locates a configuration value inside the workspace.
// +structType=atomic
type ConfigValueFrom struct {
	// env is the name of an environment variable holding the value.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Env string `json:"env,omitempty"`

	// path is the path of a file holding the value.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Path string `json:"path,omitempty"`

	// json parses the value as JSON, so structured values can be passed.
	// +optional
	JSON *bool `json:"json,omitempty"`
}

// EmbeddedPodTemplateSpec is a pod template merged over the workspace pod.
type EmbeddedPodTemplateSpec struct {
	// metadata adds labels and annotations to the workspace pod.
	// +optional
	Metadata EmbeddedObjectMeta `json:"metadata,omitempty"`

	// spec is merged (strategic merge patch) over the generated pod spec. The
	// container named "pulumi" is the workspace container.
	// +optional
	Spec *corev1.PodSpec `json:"spec,omitempty"`
}

// EmbeddedServiceTemplateSpec is a Service template merged over the workspace's
// Service.
type EmbeddedServiceTemplateSpec struct {
	// metadata adds labels and annotations to the Service.
	// +optional
	Metadata EmbeddedObjectMeta `json:"metadata,omitempty"`
}

// EmbeddedObjectMeta is the part of object metadata a template may set.
type EmbeddedObjectMeta struct {
	// labels are added to the generated object.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// annotations are added to the generated object.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// WorkspaceStatus is the observed state of a Workspace.
type WorkspaceStatus struct {
	// observedGeneration is the generation of the spec the status reflects.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// address is where the workspace agent serves its RPC API (host:port).
	// +optional
	Address string `json:"address,omitempty"`

	// pulumiVersion is the version of the Pulumi CLI in the workspace.
	// +optional
	PulumiVersion string `json:"pulumiVersion,omitempty"`

	// configurationFailure counts the consecutive failed attempts to apply
	// the stacks' configuration (select or create a stack, set its
	// configuration) with an error that may pass: a stack locked by another
	// run, an unreachable backend, an agent restarting. They are retried
	// after 5 s, 10 s, 20 s… up to every 5 minutes; once they have failed
	// for 2 minutes and at least 5 times, the Workspace is Stalled (reason
	// ConfigurationFailed, with the last error) and still retried every 5
	// minutes, so a cause that passes heals by itself. An invalid
	// configuration, or a stack missing with create off, is Stalled at once,
	// until the spec changes. Kept in status so that a restarted operator
	// decides the same; cleared by a success; failures of an older
	// generation do not count.
	// +optional
	ConfigurationFailure *WorkspaceConfigurationFailure `json:"configurationFailure,omitempty"`

	// conditions describe the workspace's state: Ready (reason Running once
	// the agent serves the spec's revision and stack configuration, else why
	// not), and Stalled while it needs someone to act: its reason says why
	// (SpecInvalid, PodSecurityForbidden, SourceUnavailable,
	// InstallationFailed, CheckoutFailed, ConfigurationFailed, or the pod's
	// ImagePullFailed, ContainerConfigInvalid, CrashLooping, Unschedulable).
	// A failure that may pass stalls only once it has lasted, and is still
	// retried (see configurationFailure).
	// +optional
	// +patchMergeKey=type
	// +patchStrategy=merge
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// WorkspaceConfigurationFailure counts consecutive failures to apply the
// stacks' configuration.
type WorkspaceConfigurationFailure struct {
	// generation is the Workspace generation the attempts were made for.
	// +required
	// +kubebuilder:validation:Minimum=0
	Generation int64 `json:"generation"`
	// since is when the first of the consecutive failures happened.
	// +required
	Since metav1.Time `json:"since"`
	// attempts counts the consecutive failed attempts.
	// +required
	// +kubebuilder:validation:Minimum=1
	Attempts int32 `json:"attempts"`
}

// Workspace is an isolated environment (a pod, or a local process in development)
// running the Stackflow workspace agent, which drives the Pulumi Automation API for
// one program.
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=pulumi
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.status.address`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Image",type=string,priority=1,JSONPath=`.spec.image`
type Workspace struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec describes the workspace environment.
	Spec WorkspaceSpec `json:"spec,omitempty"`
	// status is the observed state of the workspace.
	Status WorkspaceStatus `json:"status,omitempty"`
}

// WorkspaceList is a list of Workspaces.
// +kubebuilder:object:root=true
type WorkspaceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Workspace `json:"items"`
}

// GetConditions returns the Workspace's status conditions for change in place,
// so that condition helpers serve every kind alike.
func (w *Workspace) GetConditions() *[]metav1.Condition { return &w.Status.Conditions }

func init() {
	SchemeBuilder.Register(&Workspace{}, &WorkspaceList{})
}
