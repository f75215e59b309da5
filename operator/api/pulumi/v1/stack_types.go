package v1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
)

// ReconcileRequestAnnotation asks the operator to reconcile a Stack now: any new
// value (a timestamp, by convention) starts a reconcile, and the Stack's
// status.observedReconcileRequest echoes it once handled.
const ReconcileRequestAnnotation = "pulumi.com/reconciliation-request"

// StackSpec is the desired state of a Stack: which program, which Pulumi stack,
// which configuration, and when to run it.
// +kubebuilder:validation:XValidation:rule="!(has(self.branch) && has(self.commit))",message="spec.branch and spec.commit are mutually exclusive: track a branch, or pin a commit"
// +kubebuilder:validation:XValidation:rule="(has(self.projectRepo) ? 1 : 0) + (has(self.programRef) ? 1 : 0) + (has(self.fluxSource) ? 1 : 0) <= 1",message="set at most one program source among spec.projectRepo, spec.programRef and spec.fluxSource"
// +kubebuilder:validation:XValidation:rule="!has(self.projectRepo) || has(self.branch) || has(self.commit)",message="spec.projectRepo needs spec.branch (to track) or spec.commit (to pin)"
// +kubebuilder:validation:XValidation:rule="!(has(self.approval) && has(self.approval.required) && self.approval.required && has(self.preview) && self.preview)",message="spec.approval.required and spec.preview exclude each other: a preview-only Stack applies nothing to approve"
type StackSpec struct {
	// accessTokenSecret is the name of a Secret whose key "accessToken" holds the
	// Pulumi access token. Deprecated: use envRefs with PULUMI_ACCESS_TOKEN.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	AccessTokenSecret string `json:"accessTokenSecret,omitempty"`

	// envs lists ConfigMaps (in the Stack's namespace) whose entries are all
	// exported as environment variables. Deprecated: use envRefs.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Envs []string `json:"envs,omitempty"`

	// envRefs sets environment variables of the Pulumi process from Secrets,
	// files, other variables or literals, keyed by the variable name.
	// +optional
	// +kubebuilder:validation:MaxProperties=256
	EnvRefs map[string]ResourceRef `json:"envRefs,omitempty"`

	// envSecrets lists Secrets (in the Stack's namespace) whose entries are all
	// exported as environment variables. Deprecated: use envRefs.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	SecretEnvs []string `json:"envSecrets,omitempty"`

	// backend is the Pulumi state backend URL (https://api.pulumi.com, s3://…,
	// file://…). Empty means the backend named by PULUMI_BACKEND_URL in the
	// workspace, or Pulumi Cloud.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Backend string `json:"backend,omitempty"`

	// stack is the fully qualified Pulumi stack name ([org/][project/]stack).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Stack string `json:"stack"`

	// config sets stack configuration values, keyed by configuration key
	// ("aws:region", "app:settings"). Values may be any JSON: strings, numbers,
	// booleans, objects and arrays.
	// +optional
	// +kubebuilder:validation:MaxProperties=1024
	Config map[string]apiextensionsv1.JSON `json:"config,omitempty"`

	// secrets sets secret configuration values from literals. Deprecated: use
	// secretsRef, which keeps the values out of the Stack object.
	// +optional
	// +kubebuilder:validation:MaxProperties=1024
	Secrets map[string]string `json:"secrets,omitempty"`

	// configRef sets configuration values from ConfigMap keys, keyed by
	// configuration key.
	// +optional
	// +kubebuilder:validation:MaxProperties=1024
	ConfigRef map[string]ConfigMapRef `json:"configRef,omitempty"`

	// secretsRef sets secret configuration values from Secrets, files, variables
	// or literals, keyed by configuration key. They are stored encrypted and never
	// shown in status, events or logs.
	// +optional
	// +kubebuilder:validation:MaxProperties=1024
	SecretRefs map[string]ResourceRef `json:"secretsRef,omitempty"`

	// secretsProvider is the secrets provider used when the stack is created
	// ("passphrase", "awskms://…", "gcpkms://…", …).
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	SecretsProvider string `json:"secretsProvider,omitempty"`

	// GitSource: projectRepo, branch or commit, repoDir, shallow, gitAuth.
	*GitSource `json:",inline"`

	// fluxSource takes the program from a Flux source (GitRepository,
	// OCIRepository, Bucket) artifact.
	// +optional
	FluxSource *FluxSource `json:"fluxSource,omitempty"`

	// programRef takes the program from a Program object in the same namespace.
	// +optional
	ProgramRef *ProgramReference `json:"programRef,omitempty"`

	// targets limits updates to these resource URNs.
	// +optional
	// +kubebuilder:validation:MaxItems=1024
	Targets []string `json:"targets,omitempty"`

	// targetDependents also updates resources that depend on the targets.
	// +optional
	TargetDependents bool `json:"targetDependents,omitempty"`

	// prerequisites are Stacks (in the same namespace) whose last update must have
	// succeeded before this Stack updates: the way to order dev → test → prod.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Prerequisites []PrerequisiteRef `json:"prerequisites,omitempty"`

	// continueResyncOnCommitMatch keeps running updates every
	// resyncFrequencySeconds even when the commit has not changed (to correct
	// drift).
	// +optional
	ContinueResyncOnCommitMatch bool `json:"continueResyncOnCommitMatch,omitempty"`

	// refresh refreshes the state from the providers before each update.
	// +optional
	Refresh bool `json:"refresh,omitempty"`

	// expectNoRefreshChanges fails an update whose refresh finds changes.
	// +optional
	ExpectNoRefreshChanges bool `json:"expectNoRefreshChanges,omitempty"`

	// destroyOnFinalize destroys the stack's resources when the Stack is deleted.
	// +optional
	DestroyOnFinalize bool `json:"destroyOnFinalize,omitempty"`

	// runProgram runs the program during refresh and destroy.
	// +optional
	RunProgram bool `json:"runProgram,omitempty"`

	// retryOnUpdateConflict retries an update that failed because another
	// update held the stack.
	// +optional
	RetryOnUpdateConflict bool `json:"retryOnUpdateConflict,omitempty"`

	// useLocalStackOnly uses the stack configuration file (Pulumi.<stack>.yaml)
	// from the program source and never creates the stack in the backend.
	// +optional
	UseLocalStackOnly bool `json:"useLocalStackOnly,omitempty"`

	// resyncFrequencySeconds is how often, in seconds, the Stack re-resolves its
	// branch and (with continueResyncOnCommitMatch) re-runs. Minimum 60; default
	// 60 for branch tracking.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == 0 || self >= 60",message="spec.resyncFrequencySeconds must be at least 60 (or 0 for the default)"
	ResyncFrequencySeconds int64 `json:"resyncFrequencySeconds,omitempty"`

	// serviceAccountName is the Kubernetes service account of the workspace pod.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// workspaceTemplate is merged (strategic merge patch) over the Workspace
	// generated for this Stack, to customize its image, resources, pod, etc.
	// +optional
	WorkspaceTemplate *WorkspaceTemplate `json:"workspaceTemplate,omitempty"`

	// workspaceReclaimPolicy says what happens to the Workspace after a
	// successful update: Retain (the default) keeps it for the next update,
	// Delete removes it to save resources.
	// +optional
	WorkspaceReclaimPolicy WorkspaceReclaimPolicy `json:"workspaceReclaimPolicy,omitempty"`

	// workspaceIdleTimeoutSeconds removes the Workspace (and so its pod)
	// of an up-to-date Stack once nothing has run in it for this long; the
	// next operation (a commit, a change, a resync, a drift check) creates
	// it again, which costs a fresh checkout and program install. Minimum
	// 60; 0 takes the operator's --workspace-idle-timeout (off by
	// default). With workspaceReclaimPolicy Delete the Workspace goes at
	// once anyway. A Stackflow extension.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == 0 || self >= 60",message="spec.workspaceIdleTimeoutSeconds must be at least 60 (or 0 for the operator's default)"
	WorkspaceIdleTimeoutSeconds int64 `json:"workspaceIdleTimeoutSeconds,omitempty"`

	// environment lists Pulumi ESC environments imported into the stack.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Environment []string `json:"environment,omitempty"`

	// updateTemplate is merged over the Updates generated for this Stack, to set
	// e.g. their ttlAfterCompleted, parallelism or labels.
	// +optional
	UpdateTemplate *UpdateTemplate `json:"updateTemplate,omitempty"`

	// retryMaxBackoffDurationSeconds caps the exponential backoff between
	// retries of a failed update. Default 3600.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RetryMaxBackoffDurationSeconds int64 `json:"retryMaxBackoffDurationSeconds,omitempty"`

	// preview runs only previews: the Stack reports what would change and never
	// changes infrastructure. Turn it off to deploy.
	// +optional
	Preview bool `json:"preview,omitempty"`

	// driftDetection checks, periodically and without changing anything,
	// whether the infrastructure still matches the last successful update (a
	// preview with refresh), and reports differences in the DriftDetected
	// condition. A Stackflow extension: PKO's continueResyncOnCommitMatch with
	// refresh keeps working as before, but always remediates.
	// +optional
	DriftDetection *DriftDetection `json:"driftDetection,omitempty"`

	// approval makes every change wait for a person: with required, a new
	// desired state (commit, configuration, inputs) runs a preview that saves
	// an update plan, the Stack waits (Ready=False, reason AwaitingApproval)
	// until a PlanApproval (stackflow.io/v1alpha1) approves that plan by its
	// fingerprint, and the up is then constrained to exactly that plan (it
	// stops at the first operation the plan does not contain: PlanStale).
	// See docs/approvals.md. A Stackflow extension.
	// +optional
	Approval *ApprovalPolicy `json:"approval,omitempty"`

	// exports writes the Stack's outputs to a ConfigMap and/or a Secret in
	// its namespace after each successful update (up or refresh), so other
	// workloads and other Stacks (configRef, envRefs, secretsRef) can read
	// them. Secret outputs go only to the Secret: mapping one into the
	// ConfigMap is refused when an update reveals it (status.exports,
	// Stalled ExportFailed) and nothing of that update is written. The
	// objects carry the annotation stackflow.io/content-hash, are owned by
	// the Stack unless deletionPolicy is Retain, and an object of that name
	// the Stack did not create is never overwritten. See docs/outputs.md.
	// A Stackflow extension.
	// +optional
	Exports *StackExports `json:"exports,omitempty"`
}

// StackExports names the objects a Stack's outputs are written to.
// +kubebuilder:validation:XValidation:rule="has(self.configMap) || has(self.secret)",message="spec.exports needs configMap, secret, or both"
type StackExports struct {
	// configMap receives plain (non-secret) outputs.
	// +optional
	ConfigMap *ExportObject `json:"configMap,omitempty"`

	// secret receives outputs, secret or not (an Opaque Secret).
	// +optional
	Secret *ExportObject `json:"secret,omitempty"`

	// deletionPolicy says what becomes of the objects when the Stack is
	// deleted: Delete (the default) makes the Stack their owner, so the
	// garbage collector removes them with it; Retain keeps them (no owner
	// reference; a Stack of the same name adopts them again).
	// +optional
	DeletionPolicy ExportDeletionPolicy `json:"deletionPolicy,omitempty"`
}

// ShardLabel assigns a Stack (with its Workspace and Updates, which the
// operator labels alike) and a Program to the operator shard whose
// --watch-label-selector selects it, as Flux's sharding.fluxcd.io/key does.
// Changing it hands the Stack over: the new shard takes its Workspace and
// Updates once no update of the old shard's is running. See
// docs/operator.md, "Shards".
const ShardLabel = "sharding.stackflow.io/key"

// Annotations on exported objects.
const (
	// ExportedByAnnotation names the Stack that wrote an exported object:
	// a Stack overwrites only objects that name it.
	ExportedByAnnotation = "stackflow.io/exported-by"
	// ContentHashAnnotation is the hash of an exported object's data, for a
	// consumer that rolls when the values change: the SHA-256 of the
	// ConfigMap's data, an HMAC-SHA256 keyed by the operator's digest key
	// for the Secret's (it reveals nothing of the values).
	ContentHashAnnotation = "stackflow.io/content-hash"
)

// ExportDeletionPolicy says what becomes of exported objects when their Stack
// is deleted.
// +kubebuilder:validation:Enum=Delete;Retain
type ExportDeletionPolicy string

const (
	// ExportDelete removes the exported objects with the Stack.
	ExportDelete ExportDeletionPolicy = "Delete"
	// ExportRetain keeps the exported objects after the Stack is deleted.
	ExportRetain ExportDeletionPolicy = "Retain"
)

// ExportObject is one object outputs are written to.
// +kubebuilder:validation:XValidation:rule="!has(self.annotations) || self.annotations.all(k, !k.startsWith('stackflow.io/'))",message="annotations under stackflow.io/ are set by the operator (stackflow.io/exported-by, stackflow.io/content-hash)"
type ExportObject struct {
	// name of the object, in the Stack's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// labels are set on the object (e.g. for a consumer's selector).
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Labels map[string]string `json:"labels,omitempty"`

	// annotations are set on the object. Keys under stackflow.io/ are the
	// operator's.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Annotations map[string]string `json:"annotations,omitempty"`

	// keys are the object's data keys and the output each holds: the
	// object holds exactly these keys.
	// +required
	// +listType=map
	// +listMapKey=key
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	Keys []ExportKey `json:"keys"`
}

// ExportKey puts one output, or a value inside it, under one data key.
type ExportKey struct {
	// key is the data key: letters, digits, '-', '_' and '.'.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`

	// output names the Stack output.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Output string `json:"output"`

	// path selects a value inside a map or list output: fields separated
	// by dots, list indexes in brackets, a field with other characters as
	// a quoted string in brackets (db.hosts[0].name, tags["team.name"]).
	// Without it the whole output is written. Strings are written as they
	// are; numbers, booleans, maps and lists as JSON.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Path string `json:"path,omitempty"`
}

// ApprovalPolicy says whether a Stack's changes wait for an approval.
type ApprovalPolicy struct {
	// required makes every change of the Stack's infrastructure (deploy and
	// drift remediation) wait for a PlanApproval of its plan. Drift checks
	// and destroys on deletion (destroyOnFinalize) do not wait.
	// +optional
	Required bool `json:"required,omitempty"`

	// expireAfterSeconds is how long a plan may be approved after its change
	// was first previewed; past it the plan is previewed again and needs a
	// new approval. Default 86400 (a day); between 300 and 2592000 (30 days).
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == 0 || (self >= 300 && self <= 2592000)",message="spec.approval.expireAfterSeconds must be between 300 and 2592000 (or 0 for the default, 86400)"
	ExpireAfterSeconds int64 `json:"expireAfterSeconds,omitempty"`
}

// DriftDetection configures drift checks.
type DriftDetection struct {
	// intervalSeconds is the time between drift checks. Default 300; minimum
	// 60.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == 0 || self >= 60",message="spec.driftDetection.intervalSeconds must be at least 60 (or 0 for the default)"
	IntervalSeconds int64 `json:"intervalSeconds,omitempty"`

	// remediate runs an up (with refresh) when drift is found, putting the
	// infrastructure back to the program's state. Off by default: drift is
	// only reported.
	// +optional
	Remediate bool `json:"remediate,omitempty"`
}

// DriftCheck records the last drift check.
type DriftCheck struct {
	// update is the preview Update that ran the last check.
	// +optional
	Update string `json:"update,omitempty"`
	// revision is the revision checked.
	// +optional
	Revision string `json:"revision,omitempty"`
	// lastCheckTime is when the last check finished.
	// +optional
	LastCheckTime metav1.Time `json:"lastCheckTime,omitempty"`
	// changes counts the resources that differ, by operation, as the last
	// check that ran to the end found them.
	// +optional
	Changes map[string]int64 `json:"changes,omitempty"`
	// failure says why the last check did not run to the end (its Update's
	// message, else its reason); empty when it did. Its DriftCheckFailed
	// event is sent once this record is stored.
	// +optional
	Failure string `json:"failure,omitempty"`
	// remediationPending is set when a check found drift and
	// spec.driftDetection.remediate is on: the next update is an up with
	// refresh. Cleared when that up starts.
	// +optional
	RemediationPending bool `json:"remediationPending,omitempty"`
}

// GitSource is a git repository holding the Pulumi program.
type GitSource struct {
	// projectRepo is the git repository URL (https://, ssh://, git@host:path,
	// file://).
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	ProjectRepo string `json:"projectRepo,omitempty"`

	// gitAuthSecret names a Secret with git credentials (keys accessToken, or
	// username and password, or sshPrivateKey). Deprecated: use gitAuth.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	GitAuthSecret string `json:"gitAuthSecret,omitempty"`

	// gitAuth selects the git credentials.
	// +optional
	GitAuth *GitAuthConfig `json:"gitAuth,omitempty"`

	// repoDir is the directory within the repository holding Pulumi.yaml.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	RepoDir string `json:"repoDir,omitempty"`

	// commit pins the program to this full 40-character commit SHA. Exclusive
	// with branch.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9a-f]{40}$')",message="spec.commit must be a full 40-character lowercase hexadecimal commit SHA"
	Commit string `json:"commit,omitempty"`

	// branch tracks the head of this branch ("main" or "refs/heads/main"),
	// re-resolved every resyncFrequencySeconds. Exclusive with commit.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Branch string `json:"branch,omitempty"`

	// shallow fetches only the needed commit instead of the full history.
	// +optional
	Shallow bool `json:"shallow,omitempty"`
}

// PrerequisiteRef is a Stack that must have succeeded before this one updates.
type PrerequisiteRef struct {
	// name is the prerequisite Stack's name, in the same namespace.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="size(self) > 0",message="a prerequisite needs the name of a Stack"
	Name string `json:"name"`

	// requirement says what the prerequisite must satisfy; by default its last
	// update must have succeeded.
	// +optional
	Requirement *RequirementSpec `json:"requirement,omitempty"`
}

// RequirementSpec is what a prerequisite Stack must satisfy.
type RequirementSpec struct {
	// succeededWithinDuration requires the prerequisite's last successful update
	// to be at most this old (e.g. "1h"); an older one is asked to re-sync and
	// waited for.
	// +optional
	SucceededWithinDuration *metav1.Duration `json:"succeededWithinDuration,omitempty"`
}

// GitAuthConfig selects git credentials: an access token, an SSH key, a user name
// and password, or a GitHub App. Set one.
// +kubebuilder:validation:XValidation:rule="(has(self.accessToken) ? 1 : 0) + (has(self.sshAuth) ? 1 : 0) + (has(self.basicAuth) ? 1 : 0) + (has(self.githubApp) ? 1 : 0) <= 1",message="spec.gitAuth takes one of accessToken, sshAuth, basicAuth or githubApp"
type GitAuthConfig struct {
	// accessToken is a personal access token.
	// +optional
	PersonalAccessToken *ResourceRef `json:"accessToken,omitempty"`

	// sshAuth is an SSH private key with an optional password.
	// +optional
	SSHAuth *SSHAuth `json:"sshAuth,omitempty"`

	// basicAuth is a user name and password.
	// +optional
	BasicAuth *BasicAuth `json:"basicAuth,omitempty"`

	// githubApp authenticates as a GitHub App installation.
	// +optional
	GitHubApp *GitHubAppAuth `json:"githubApp,omitempty"`
}

// GitHubAppAuth holds a GitHub App's credentials.
type GitHubAppAuth struct {
	// appID is the App's numeric ID.
	AppID ResourceRef `json:"appID"`
	// installationID is the App installation's numeric ID.
	InstallationID ResourceRef `json:"installationID"`
	// privateKey is the App's PEM-encoded private key.
	PrivateKey ResourceRef `json:"privateKey"`
	// apiURL is the GitHub REST API the installation token is requested
	// from: https://api.github.com by default; for GitHub Enterprise Server
	// https://<host>/api/v3. It must be https, name a host (and optionally a
	// port), have an empty path or one ending in /api/v3, and carry no user
	// info, query or fragment; the operator's --github-api-hosts, when set,
	// lists the hosts it may name.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https://[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?([.][A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*(:[0-9]{1,5})?((/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)*/api/v3)?/?$')",message="githubApp.apiURL must be https://<host>[:<port>] with an empty path or a path ending in /api/v3 (GitHub Enterprise Server), and no user info, query or fragment"
	APIURL string `json:"apiURL,omitempty"`
}

// SSHAuth is an SSH private key, with an optional password.
type SSHAuth struct {
	// sshPrivateKey is the PEM-encoded private key.
	SSHPrivateKey ResourceRef `json:"sshPrivateKey"`
	// password decrypts the private key.
	// +optional
	Password *ResourceRef `json:"password,omitempty"`
	// knownHosts holds known_hosts lines (OpenSSH format, e.g. the output of
	// `ssh-keyscan <host>`) that the SSH server's host key must match. When
	// unset, the operator's --ssh-known-hosts file is used; with neither,
	// SSH fails: host keys are never accepted unverified.
	// +optional
	KnownHosts *ResourceRef `json:"knownHosts,omitempty"`
}

// BasicAuth is a user name and password.
type BasicAuth struct {
	// userName is the user name.
	UserName ResourceRef `json:"userName"`
	// password is the password.
	Password ResourceRef `json:"password"`
}

// FluxSource is a Flux source object whose artifact holds the program.
type FluxSource struct {
	// sourceRef names the Flux source object in the Stack's namespace.
	SourceRef FluxSourceReference `json:"sourceRef"`
	// dir is the directory within the artifact holding Pulumi.yaml.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Dir string `json:"dir,omitempty"`
}

// FluxSourceReference names a Flux source object.
type FluxSourceReference struct {
	// apiVersion of the source, e.g. source.toolkit.fluxcd.io/v1.
	// +kubebuilder:validation:MinLength=1
	APIVersion string `json:"apiVersion"`
	// kind of the source: GitRepository, OCIRepository or Bucket.
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// name of the source.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// ProgramReference names a Program in the Stack's namespace.
type ProgramReference struct {
	// name is the Program's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// ResourceSelectorType is where a ResourceRef reads its value.
// +kubebuilder:validation:Enum=Env;FS;Secret;Literal
type ResourceSelectorType string

const (
	// ResourceSelectorEnv reads an environment variable of the operator.
	ResourceSelectorEnv ResourceSelectorType = "Env"
	// ResourceSelectorFS reads a file of the operator.
	ResourceSelectorFS ResourceSelectorType = "FS"
	// ResourceSelectorSecret reads a Secret key.
	ResourceSelectorSecret ResourceSelectorType = "Secret"
	// ResourceSelectorLiteral uses the literal value given.
	ResourceSelectorLiteral ResourceSelectorType = "Literal"
)

// ResourceRef locates a value: a Secret key, a file, an environment variable or
// a literal, chosen by type.
// +kubebuilder:validation:XValidation:rule="self.type != 'Secret' || has(self.secret)",message="type Secret needs secret.name and secret.key"
// +kubebuilder:validation:XValidation:rule="self.type != 'Env' || has(self.env)",message="type Env needs env.name"
// +kubebuilder:validation:XValidation:rule="self.type != 'FS' || has(self.filesystem)",message="type FS needs filesystem.path"
// +kubebuilder:validation:XValidation:rule="self.type != 'Literal' || has(self.literal)",message="type Literal needs literal.value"
type ResourceRef struct {
	// type is where the value is read: Env, FS, Secret or Literal.
	SelectorType ResourceSelectorType `json:"type"`

	// ResourceSelector: the location, matching type.
	ResourceSelector `json:",inline"`
}

// ResourceSelector holds one location; set the one that matches the type.
type ResourceSelector struct {
	// filesystem reads a file.
	// +optional
	FileSystem *FSSelector `json:"filesystem,omitempty"`
	// env reads an environment variable.
	// +optional
	Env *EnvSelector `json:"env,omitempty"`
	// secret reads a Secret key.
	// +optional
	SecretRef *SecretSelector `json:"secret,omitempty"`
	// literal is the value itself.
	// +optional
	LiteralRef *LiteralRef `json:"literal,omitempty"`
}

// FSSelector is a file path.
type FSSelector struct {
	// path of the file.
	// +kubebuilder:validation:MinLength=1
	Path string `json:"path"`
}

// EnvSelector is an environment variable.
type EnvSelector struct {
	// name of the variable.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// SecretSelector is a key of a Secret.
type SecretSelector struct {
	// namespace of the Secret. Deprecated: only the Stack's own namespace is
	// allowed; leave empty.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// name of the Secret.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// key within the Secret.
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key"`
}

// LiteralRef is a literal value.
type LiteralRef struct {
	// value is the literal.
	Value string `json:"value"`
}

// ConfigMapRef is a key of a ConfigMap in the Stack's namespace.
type ConfigMapRef struct {
	// name of the ConfigMap.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="size(self) > 0",message="configRef needs the name of a ConfigMap"
	Name string `json:"name"`
	// key within the ConfigMap.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="size(self) > 0",message="configRef needs the key within the ConfigMap"
	Key string `json:"key"`
	// json parses the value as JSON, so structured values (objects, arrays,
	// numbers, booleans) reach the program as such.
	// +optional
	JSON *bool `json:"json,omitempty"`
}

// WorkspaceReclaimPolicy says what happens to a Stack's Workspace after a
// successful update.
// +kubebuilder:validation:Enum=Retain;Delete
type WorkspaceReclaimPolicy string

const (
	// WorkspaceReclaimRetain keeps the Workspace for the next update.
	WorkspaceReclaimRetain WorkspaceReclaimPolicy = "Retain"
	// WorkspaceReclaimDelete deletes the Workspace after a successful update.
	WorkspaceReclaimDelete WorkspaceReclaimPolicy = "Delete"
)

// WorkspaceTemplate customizes the Workspace generated for a Stack.
type WorkspaceTemplate struct {
	// metadata adds labels and annotations to the Workspace.
	// +optional
	Metadata autov1alpha1.EmbeddedObjectMeta `json:"metadata,omitempty"`
	// spec is merged over the generated Workspace spec.
	// +optional
	Spec *autov1alpha1.WorkspaceSpec `json:"spec,omitempty"`
}

// UpdateTemplate customizes the Updates generated for a Stack.
type UpdateTemplate struct {
	// metadata adds labels and annotations to the Updates.
	// +optional
	Metadata autov1alpha1.EmbeddedObjectMeta `json:"metadata,omitempty"`
	// spec is merged over the generated Update spec.
	// +optional
	Spec *autov1alpha1.UpdateSpec `json:"spec,omitempty"`
}

// StackOutputs are a stack's outputs by name; secret values read "[secret]".
type StackOutputs map[string]apiextensionsv1.JSON

// ProjectInfo names a Pulumi project and its runtime.
type ProjectInfo struct {
	// name is the Pulumi project name.
	Name string `json:"name"`
	// runtime is the Pulumi project runtime.
	Runtime string `json:"runtime"`
}

// StackUpdateStateMessage is the result of a Stack's last update.
type StackUpdateStateMessage string

const (
	// SucceededStackStateMessage: the last update succeeded.
	SucceededStackStateMessage StackUpdateStateMessage = "succeeded"
	// FailedStackStateMessage: the last update failed.
	FailedStackStateMessage StackUpdateStateMessage = "failed"
)

// Permalink links to an update in the Pulumi backend.
type Permalink string

// StackUpdateState is the record of a Stack's last finished update.
type StackUpdateState struct {
	// generation is the Stack generation the update ran for.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// reconcileRequest is the reconcile request the update ran for.
	// +optional
	ReconcileRequest string `json:"reconcileRequest,omitempty"`
	// name is the Update object's name.
	// +optional
	Name string `json:"name,omitempty"`
	// type is the operation: up, preview, refresh or destroy.
	// +optional
	Type autov1alpha1.UpdateType `json:"type,omitempty"`
	// state is "succeeded" or "failed".
	// +optional
	State StackUpdateStateMessage `json:"state,omitempty"`
	// message is the update's result message.
	// +optional
	Message string `json:"message,omitempty"`
	// lastAttemptedCommit is the commit (or artifact revision) of the last
	// update, successful or not.
	// +optional
	LastAttemptedCommit string `json:"lastAttemptedCommit,omitempty"`
	// lastSuccessfulCommit is the commit (or artifact revision) of the last
	// successful update.
	// +optional
	LastSuccessfulCommit string `json:"lastSuccessfulCommit,omitempty"`
	// permalink links to the update in the backend.
	// +optional
	Permalink Permalink `json:"permalink,omitempty"`
	// lastResyncTime is when the update finished.
	// +optional
	LastResyncTime metav1.Time `json:"lastResyncTime,omitempty"`
	// failures counts consecutive failed updates; reset by a success.
	// +optional
	Failures int64 `json:"failures,omitempty"`
	// inputsDigest is a keyed digest of the values the update read from
	// referenced ConfigMaps and Secrets (configRef, secretsRef, envRefs, envs,
	// envSecrets): a change of it runs an update. It reveals nothing about the
	// values. A Stackflow extension.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	InputsDigest string `json:"inputsDigest,omitempty"`
}

// UpdatePurpose says why the Stack started an Update.
// +kubebuilder:validation:Enum=deploy;drift-check;remediate;destroy;plan
type UpdatePurpose string

const (
	// UpdatePurposeDeploy applies (or, in preview mode, previews) the Stack's
	// program, configuration and inputs.
	UpdatePurposeDeploy UpdatePurpose = "deploy"
	// UpdatePurposeDriftCheck is a preview with refresh that reports drift and
	// changes nothing.
	UpdatePurposeDriftCheck UpdatePurpose = "drift-check"
	// UpdatePurposeRemediate is an up with refresh that puts drifted
	// infrastructure back to the program's state.
	UpdatePurposeRemediate UpdatePurpose = "remediate"
	// UpdatePurposeDestroy destroys the stack's resources (destroyOnFinalize).
	UpdatePurposeDestroy UpdatePurpose = "destroy"
	// UpdatePurposePlan is a preview that saves an update plan for approval
	// (spec.approval.required); it changes nothing.
	UpdatePurposePlan UpdatePurpose = "plan"
)

// StackConflict records that the Stack's last update found the Pulumi stack
// locked by another run.
type StackConflict struct {
	// update is the Update that met the lock.
	// +optional
	Update string `json:"update,omitempty"`
	// time is when it ended.
	// +optional
	Time metav1.Time `json:"time,omitempty"`
	// count is how many updates in a row met a lock for this generation,
	// revision and inputs.
	// +optional
	Count int64 `json:"count,omitempty"`
	// generation is the Stack generation the conflicting update ran for; a
	// new one ends the conflict.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// revision is the commit (or artifact revision) the conflicting update
	// ran for; a new one ends the conflict.
	// +optional
	Revision string `json:"revision,omitempty"`
	// inputsDigest is the digest of the inputs the conflicting update ran
	// with; new inputs end the conflict.
	// +optional
	InputsDigest string `json:"inputsDigest,omitempty"`
	// reconcileRequest is the reconcile request the conflicting update ran
	// for; a new request ends the conflict.
	// +optional
	ReconcileRequest string `json:"reconcileRequest,omitempty"`
	// message is the engine's conflict message.
	// +optional
	Message string `json:"message,omitempty"`
}

// CurrentStackUpdate is the update a Stack is running now.
type CurrentStackUpdate struct {
	// generation is the Stack generation the update runs for.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// reconcileRequest is the reconcile request the update runs for.
	// +optional
	ReconcileRequest string `json:"reconcileRequest,omitempty"`
	// name is the Update object's name.
	// +optional
	Name string `json:"name,omitempty"`
	// commit is the commit (or artifact revision) being applied.
	// +optional
	Commit string `json:"commit,omitempty"`
	// number is the Update's sequence number (status.updateSequence when it
	// started); its name is <stack>-<number>. A Stackflow extension.
	// +optional
	Number int64 `json:"number,omitempty"`
	// purpose says why the Update runs: deploy, drift-check, remediate or
	// destroy. A Stackflow extension.
	// +optional
	Purpose UpdatePurpose `json:"purpose,omitempty"`
	// inputsDigest is the digest of the referenced inputs the Update runs
	// with (see lastUpdate.inputsDigest). A Stackflow extension.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	InputsDigest string `json:"inputsDigest,omitempty"`
}

// StackStatus is the observed state of a Stack.
type StackStatus struct {
	// outputs are the stack outputs after the last successful update; secret
	// values read "[secret]".
	// +optional
	Outputs StackOutputs `json:"outputs,omitempty"`

	// lastUpdate records the last finished update.
	// +optional
	LastUpdate *StackUpdateState `json:"lastUpdate,omitempty"`

	// observedGeneration is the generation the status reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// observedReconcileRequest is the last value of the
	// pulumi.com/reconciliation-request annotation that was handled.
	// +optional
	ObservedReconcileRequest string `json:"observedReconcileRequest,omitempty"`

	// conditions: Ready is always present; Reconciling while work is under way;
	// Stalled while the Stack cannot progress without a change from the user.
	// +optional
	// +patchMergeKey=type
	// +patchStrategy=merge
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// currentUpdate is the update in progress, if any.
	// +optional
	CurrentUpdate *CurrentStackUpdate `json:"currentUpdate,omitempty"`

	// projectInfo names the Pulumi project.
	// +optional
	ProjectInfo *ProjectInfo `json:"projectInfo,omitempty"`

	// driftCheck records the last (or running) drift check, with
	// spec.driftDetection.
	// +optional
	DriftCheck *DriftCheck `json:"driftCheck,omitempty"`

	// updateSequence numbers the Updates this Stack started: the next one is
	// named <stack>-<updateSequence+1>, so an operator that restarts (or a new
	// leader) finds an Update it created but did not record instead of
	// starting another. A Stackflow extension.
	// +optional
	UpdateSequence int64 `json:"updateSequence,omitempty"`

	// conflict is set while the last update found the Pulumi stack locked by
	// another run: with retryOnUpdateConflict it is retried with backoff,
	// otherwise the Stack is Stalled (UpdateConflict) until its spec,
	// revision, inputs or reconcile request change. A Stackflow extension.
	// +optional
	Conflict *StackConflict `json:"conflict,omitempty"`

	// plan is the update plan of the Stack's latest change, with
	// spec.approval.required: what it would do, its fingerprint (what a
	// PlanApproval approves), and what became of it. A Stackflow extension.
	// +optional
	Plan *StackPlan `json:"plan,omitempty"`

	// exports records the last export of the Stack's outputs
	// (spec.exports): the update whose outputs the objects hold, each
	// object's content hash, or why that update's outputs were not
	// written. A Stackflow extension.
	// +optional
	Exports *StackExportsStatus `json:"exports,omitempty"`
}

// StackExportsStatus is what became of the outputs of one update.
type StackExportsStatus struct {
	// update is the Update whose outputs were exported (or refused).
	// +kubebuilder:validation:MaxLength=253
	Update string `json:"update"`

	// commit is that update's commit.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Commit string `json:"commit,omitempty"`

	// time is when the export was made (or refused).
	Time metav1.Time `json:"time"`

	// configMap is the ConfigMap written.
	// +optional
	ConfigMap *ExportedObject `json:"configMap,omitempty"`

	// secret is the Secret written.
	// +optional
	Secret *ExportedObject `json:"secret,omitempty"`

	// reason is set when nothing of the update's outputs was written:
	// ExportRefused (the mapping does not fit the outputs: a secret output
	// into the ConfigMap, a missing output or path, a value the API server
	// refuses) or ExportConflict (an object of that name the Stack did not
	// create).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason,omitempty"`

	// message says why, naming the output and key (never a value).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
}

// Reasons of status.exports.
const (
	// ExportRefusedReason: the mapping does not fit the update's outputs.
	ExportRefusedReason = "ExportRefused"
	// ExportConflictReason: an object of that name exists and the Stack did
	// not create it.
	ExportConflictReason = "ExportConflict"
)

// ExportedObject is one object written, and the hash of its data.
type ExportedObject struct {
	// name of the object.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// hash is the content hash of its data, as its annotation
	// stackflow.io/content-hash holds it (keyed for the Secret).
	// +kubebuilder:validation:MaxLength=64
	Hash string `json:"hash"`
}

// PlanState is what became of a Stack's plan.
// +kubebuilder:validation:Enum=AwaitingApproval;Rejected;Applying;Applied;Stale;Failed;PreviewFailed
type PlanState string

const (
	// PlanAwaitingApproval: previewed and saved; no approval of its
	// fingerprint yet.
	PlanAwaitingApproval PlanState = "AwaitingApproval"
	// PlanRejected: a PlanApproval with decision Rejected names it.
	PlanRejected PlanState = "Rejected"
	// PlanApplying: approved; the up constrained to it runs.
	PlanApplying PlanState = "Applying"
	// PlanApplied: the up constrained to it succeeded.
	PlanApplied PlanState = "Applied"
	// PlanStale: the up stopped at an operation the plan does not contain
	// (reality moved after the preview); nothing outside the plan was
	// applied. The change is previewed again.
	PlanStale PlanState = "Stale"
	// PlanFailed: the up constrained to it failed for another reason. The
	// change is previewed again.
	PlanFailed PlanState = "Failed"
	// PlanPreviewFailed: the preview could not make a plan (the program
	// failed, or the plan is larger than Stackflow keeps: message says
	// which); it is retried with backoff.
	PlanPreviewFailed PlanState = "PreviewFailed"
)

// StackPlan records a Stack's latest update plan.
type StackPlan struct {
	// fingerprint identifies the change the plan makes (hex SHA-256 of the
	// plan without what differs between previews of one change, and of the
	// inputs digest): a PlanApproval approves it by this value.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Fingerprint string `json:"fingerprint,omitempty"`
	// state is what became of the plan.
	// +optional
	State PlanState `json:"state,omitempty"`
	// summary counts the planned operations in one line: "+create ~update
	// -delete ±replace".
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Summary string `json:"summary,omitempty"`
	// changes counts the affected resources by planned operation.
	// +optional
	Changes map[string]int64 `json:"changes,omitempty"`
	// resources lists the affected resources as "<operation> <urn>", at most
	// 50; moreResources counts the others.
	// +optional
	// +kubebuilder:validation:MaxItems=50
	Resources []string `json:"resources,omitempty"`
	// moreResources is how many affected resources resources leaves out.
	// +optional
	MoreResources int64 `json:"moreResources,omitempty"`
	// commit is the commit (or artifact revision) the plan was previewed at.
	// +optional
	Commit string `json:"commit,omitempty"`
	// inputsDigest is the digest of the referenced inputs it was previewed
	// with (see lastUpdate.inputsDigest).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	InputsDigest string `json:"inputsDigest,omitempty"`
	// generation is the Stack generation it was previewed for.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// reconcileRequest is the reconcile request it was previewed for.
	// +optional
	ReconcileRequest string `json:"reconcileRequest,omitempty"`
	// purpose is what applying it does: deploy, or remediate (drift, with
	// refresh).
	// +optional
	Purpose UpdatePurpose `json:"purpose,omitempty"`
	// update is the preview Update that made the plan.
	// +optional
	Update string `json:"update,omitempty"`
	// secretName is the Secret, in the Stack's namespace, that holds the
	// plan (key plan.json); the Stack owns it.
	// +optional
	SecretName string `json:"secretName,omitempty"`
	// proposedAt is when this change was first previewed: a later preview of
	// the same change (a new commit with the same plan) keeps it, and an
	// approval counts only if made after it.
	// +optional
	ProposedAt metav1.Time `json:"proposedAt,omitempty"`
	// createdAt is when the preview that made this plan ended.
	// +optional
	CreatedAt metav1.Time `json:"createdAt,omitempty"`
	// expiresAt is when the plan can no longer be approved
	// (proposedAt + spec.approval.expireAfterSeconds).
	// +optional
	ExpiresAt metav1.Time `json:"expiresAt,omitempty"`
	// approval is the PlanApproval that decided the plan.
	// +optional
	Approval *PlanDecision `json:"approval,omitempty"`
	// applyUpdate is the up that applies (or applied) the plan.
	// +optional
	ApplyUpdate string `json:"applyUpdate,omitempty"`
	// message says what happened last: for a stale plan the operation that
	// diverged; for one that could not be made, why.
	// +optional
	Message string `json:"message,omitempty"`
	// failures counts the previews in a row that could not make a plan of
	// this change (PreviewFailed), for the retry backoff.
	// +optional
	Failures int64 `json:"failures,omitempty"`
}

// PlanDecision records the PlanApproval that decided a plan.
type PlanDecision struct {
	// name is the PlanApproval's name.
	// +optional
	Name string `json:"name,omitempty"`
	// approver is the user who created it, as the API server authenticated
	// them (checked at admission).
	// +optional
	Approver string `json:"approver,omitempty"`
	// decision is Approved or Rejected.
	// +optional
	Decision string `json:"decision,omitempty"`
	// time is when it was created.
	// +optional
	Time metav1.Time `json:"time,omitempty"`
}

// Stack is a Pulumi stack kept up to date from a program source (a git branch or
// commit, a Program, or a Flux artifact) by running Pulumi in a Workspace.
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=pulumi
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Commit",type=string,JSONPath=`.status.lastUpdate.lastSuccessfulCommit`
// +kubebuilder:printcolumn:name="Last Update",type=string,JSONPath=`.status.lastUpdate.state`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Plan",type=string,priority=1,JSONPath=`.status.plan.state`
// +kubebuilder:printcolumn:name="Fingerprint",type=string,priority=1,JSONPath=`.status.plan.fingerprint`
// +kubebuilder:printcolumn:name="Stack",type=string,priority=1,JSONPath=`.spec.stack`
// +kubebuilder:printcolumn:name="Branch",type=string,priority=1,JSONPath=`.spec.branch`
// +kubebuilder:printcolumn:name="Exported",type=string,priority=1,JSONPath=`.status.exports.update`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 42",message="Stack name must be at most 42 characters: it names the Workspace and its pods"
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.prerequisites) || self.spec.prerequisites.all(p, p.name != self.metadata.name)",message="a Stack cannot be its own prerequisite"
type Stack struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the Stack.
	Spec StackSpec `json:"spec,omitempty"`
	// status is the observed state of the Stack.
	Status StackStatus `json:"status,omitempty"`
}

// StackList is a list of Stacks.
// +kubebuilder:object:root=true
type StackList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Stack `json:"items"`
}

// GetConditions returns the Stack's status conditions for change in place,
// so that condition helpers serve every kind alike.
func (s *Stack) GetConditions() *[]metav1.Condition { return &s.Status.Conditions }

func init() {
	SchemeBuilder.Register(&Stack{}, &StackList{})
}

// ShortFingerprint is the plan's fingerprint as messages show it: its
// first 12 digits.
func (p *StackPlan) ShortFingerprint() string {
	if len(p.Fingerprint) > 12 {
		return p.Fingerprint[:12]
	}
	return p.Fingerprint
}
