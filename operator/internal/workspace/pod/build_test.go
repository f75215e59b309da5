package pod

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
)

var testOpts = Options{
	AgentImage:         "ghcr.io/stackflow-io/stackflow:v0.1.0",
	DefaultPulumiImage: "pulumi/pulumi:3.274.1-nonroot",
	TokenSecretName:    "stackflow-agent-token",
}

// workspace is a Workspace named "app" in namespace "infra" with no source,
// changed by each mutation in turn.
func workspace(mutate ...func(*autov1alpha1.Workspace)) *autov1alpha1.Workspace {
	ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "infra"}}
	for _, m := range mutate {
		m(ws)
	}
	return ws
}

func secretKey(name, key string) *corev1.SecretKeySelector {
	return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}

func fromSecret(env, name, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: env, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: secretKey(name, key)}}
}

func withGit(ws *autov1alpha1.Workspace) {
	ws.Spec.Git = &autov1alpha1.GitSource{
		URL:     "https://github.com/example/infra.git",
		Ref:     "0123456789abcdef0123456789abcdef01234567",
		Dir:     "stacks/app",
		Shallow: true,
		Auth:    &autov1alpha1.GitAuth{Token: secretKey("git-creds", "token")},
	}
}

// baseEnv is the environment every workspace container starts with.
var baseEnv = []corev1.EnvVar{
	fromSecret("STACKFLOW_AGENT_TOKEN", "stackflow-agent-token", "token"),
	{Name: "PULUMI_HOME", Value: "/share/.pulumi"},
	{Name: "HOME", Value: "/share/home"},
	{Name: "PULUMI_SKIP_UPDATE_CHECK", Value: "true"},
}

var baseArgs = []string{"--workdir=/share/workspace", "--listen=:50051", "--auth=token"}

func concat[T any](parts ...[]T) []T {
	var out []T
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func requests(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

var defaultResources = corev1.ResourceRequirements{
	Requests: requests("cpu", "500m", "memory", "512Mi", "ephemeral-storage", "1Gi"),
}

var (
	restrictedPod = &corev1.PodSecurityContext{
		RunAsNonRoot:   new(true),
		RunAsUser:      new(int64(1000)),
		RunAsGroup:     new(int64(1000)),
		FSGroup:        new(int64(1000)),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	restrictedContainer = &corev1.SecurityContext{
		AllowPrivilegeEscalation: new(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		ReadOnlyRootFilesystem:   new(true),
	}
	baselinePod = &corev1.PodSecurityContext{
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	baselineContainer = &corev1.SecurityContext{
		AllowPrivilegeEscalation: new(false),
		ReadOnlyRootFilesystem:   new(false),
	}
)

// equal fails the test when got and want differ, showing both as JSON.
func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", "  ")
		w, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("%s:\ngot  %s\nwant %s", what, g, w)
	}
}

// findContainer returns the container called name, failing the test when there
// is none.
func findContainer(t *testing.T, cs []corev1.Container, name string) *corev1.Container {
	t.Helper()
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

// TestBuildCommon checks what every workspace gets, on the git workspace:
// names, labels, the StatefulSet shape, the init container, the workspace
// container's fixed parts, volumes and the headless Service.
func TestBuildCommon(t *testing.T) {
	sts, svc, err := Build(workspace(withGit), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{
		"app.kubernetes.io/name":         "stackflow-workspace",
		"app.kubernetes.io/managed-by":   "stackflow",
		"auto.pulumi.com/workspace-name": "app",
	}
	selector := map[string]string{"auto.pulumi.com/workspace-name": "app"}

	equal(t, "statefulset type", sts.TypeMeta, metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"})
	equal(t, "statefulset metadata", sts.ObjectMeta, metav1.ObjectMeta{Name: "app-workspace", Namespace: "infra", Labels: labels})
	equal(t, "replicas", sts.Spec.Replicas, new(int32(1)))
	equal(t, "serviceName", sts.Spec.ServiceName, "app-workspace")
	equal(t, "podManagementPolicy", sts.Spec.PodManagementPolicy, appsv1.ParallelPodManagement)
	equal(t, "selector", sts.Spec.Selector, &metav1.LabelSelector{MatchLabels: selector})
	equal(t, "template labels", sts.Spec.Template.Labels, labels)
	equal(t, "template annotations", sts.Spec.Template.Annotations, map[string]string{
		"kubectl.kubernetes.io/default-container": "pulumi",
		AnnotationPodSpecHash:                     SpecHash(sts),
	})

	spec := sts.Spec.Template.Spec
	equal(t, "serviceAccountName", spec.ServiceAccountName, "default")
	equal(t, "automountServiceAccountToken", spec.AutomountServiceAccountToken, new(true))
	equal(t, "terminationGracePeriodSeconds", spec.TerminationGracePeriodSeconds, new(int64(300)))
	equal(t, "pod securityContext", spec.SecurityContext, restrictedPod)
	equal(t, "volumes", spec.Volumes, []corev1.Volume{
		{Name: "share", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	})
	equal(t, "init containers", spec.InitContainers, []corev1.Container{{
		Name:            "bootstrap",
		Image:           testOpts.AgentImage,
		Command:         []string{"/agent", "install", "/share/agent"},
		Resources:       corev1.ResourceRequirements{Requests: requests("cpu", "100m", "memory", "64Mi")},
		VolumeMounts:    []corev1.VolumeMount{{Name: "share", MountPath: "/share"}},
		SecurityContext: restrictedContainer,
		// The tail of the log reaches the Workspace when it fails.
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}})
	if len(spec.Containers) != 1 {
		t.Fatalf("containers: got %d, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	equal(t, "container name", c.Name, "pulumi")
	equal(t, "image", c.Image, "pulumi/pulumi:3.274.1-nonroot")
	equal(t, "imagePullPolicy", c.ImagePullPolicy, corev1.PullPolicy(""))
	equal(t, "command", c.Command, []string{"/share/agent", "serve"})
	equal(t, "ports", c.Ports, []corev1.ContainerPort{{Name: "grpc", ContainerPort: 50051, Protocol: corev1.ProtocolTCP}})
	equal(t, "volumeMounts", c.VolumeMounts, []corev1.VolumeMount{
		{Name: "share", MountPath: "/share"},
		{Name: "tmp", MountPath: "/tmp"},
	})
	equal(t, "resources", c.Resources, defaultResources)
	equal(t, "container securityContext", c.SecurityContext, restrictedContainer)
	equal(t, "terminationMessagePolicy", c.TerminationMessagePolicy, corev1.TerminationMessageFallbackToLogsOnError)
	grpc := corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 50051}}
	equal(t, "readinessProbe", c.ReadinessProbe, &corev1.Probe{ProbeHandler: grpc, PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 3})
	equal(t, "startupProbe", c.StartupProbe, &corev1.Probe{ProbeHandler: grpc, PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 120})
	if c.LivenessProbe != nil {
		t.Errorf("livenessProbe: got %+v, want none (a restart would kill a running operation)", c.LivenessProbe)
	}

	equal(t, "service type", svc.TypeMeta, metav1.TypeMeta{APIVersion: "v1", Kind: "Service"})
	equal(t, "service metadata", svc.ObjectMeta, metav1.ObjectMeta{Name: "app-workspace", Namespace: "infra", Labels: labels})
	equal(t, "service spec", svc.Spec, corev1.ServiceSpec{
		Type:      corev1.ServiceTypeClusterIP,
		ClusterIP: "None",
		Selector:  selector,
		Ports: []corev1.ServicePort{{
			Name: "grpc", Protocol: corev1.ProtocolTCP, Port: 50051, TargetPort: intstr.FromString("grpc"),
		}},
		PublishNotReadyAddresses: false,
	})
}

// TestBuildWorkspaceContainer checks the workspace container of representative
// Workspaces field by field.
func TestBuildWorkspaceContainer(t *testing.T) {
	tests := []struct {
		name string
		ws   *autov1alpha1.Workspace
		opts func(*Options)

		image       string
		pullPolicy  corev1.PullPolicy
		args        []string
		env         []corev1.EnvVar
		envFrom     []corev1.EnvFromSource
		resources   corev1.ResourceRequirements
		podSC       *corev1.PodSecurityContext
		containerSC *corev1.SecurityContext
		sa          string
	}{{
		name: "git source with token auth",
		ws:   workspace(withGit),
		args: concat(baseArgs, []string{
			"--git-url=https://github.com/example/infra.git",
			"--git-ref=0123456789abcdef0123456789abcdef01234567",
			"--dir=stacks/app",
			"--git-shallow",
		}),
		env: concat(baseEnv, []corev1.EnvVar{fromSecret("GIT_TOKEN", "git-creds", "token")}),
	}, {
		// The operator's --workspace-prepare-timeout; 0 (above) leaves the
		// flag out, so existing pod templates keep their hash.
		name: "git source with a prepare timeout",
		ws:   workspace(withGit),
		opts: func(o *Options) { o.PrepareTimeout = 40 * time.Minute },
		args: concat(baseArgs, []string{
			"--git-url=https://github.com/example/infra.git",
			"--git-ref=0123456789abcdef0123456789abcdef01234567",
			"--dir=stacks/app",
			"--git-shallow",
			"--prepare-timeout=40m0s",
		}),
		env: concat(baseEnv, []corev1.EnvVar{fromSecret("GIT_TOKEN", "git-creds", "token")}),
	}, {
		name: "git source with every credential, no dir, not shallow",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.Git = &autov1alpha1.GitSource{
				URL: "git@github.com:example/infra.git",
				Ref: "main",
				Auth: &autov1alpha1.GitAuth{
					SSHPrivateKey: secretKey("ssh", "key"),
					Username:      secretKey("basic", "user"),
					Password:      secretKey("basic", "pass"),
					Token:         secretKey("pat", "token"),
					GitHubApp: &autov1alpha1.GitHubAppAuth{
						AppID:          secretKey("app", "id"),
						InstallationID: secretKey("app", "installation"),
						PrivateKey:     secretKey("app", "key.pem"),
					},
				},
			}
		}),
		args: concat(baseArgs, []string{"--git-url=git@github.com:example/infra.git", "--git-ref=main"}),
		env: concat(baseEnv, []corev1.EnvVar{
			fromSecret("GIT_SSH_PRIVATE_KEY", "ssh", "key"),
			fromSecret("GIT_USERNAME", "basic", "user"),
			fromSecret("GIT_PASSWORD", "basic", "pass"),
			fromSecret("GIT_TOKEN", "pat", "token"),
			fromSecret("GITHUB_APP_ID", "app", "id"),
			fromSecret("GITHUB_APP_INSTALLATION_ID", "app", "installation"),
			fromSecret("GITHUB_APP_PRIVATE_KEY", "app", "key.pem"),
		}),
	}, {
		name: "git source with an SSH key and the operator's known_hosts",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.Git = &autov1alpha1.GitSource{URL: "ssh://git@git.example/infra.git", Ref: "main",
				Auth: &autov1alpha1.GitAuth{SSHPrivateKey: secretKey("ssh", "key")}}
		}),
		opts: func(o *Options) { o.SSHKnownHosts = "git.example ssh-ed25519 AAAA\n" },
		args: concat(baseArgs, []string{"--git-url=ssh://git@git.example/infra.git", "--git-ref=main"}),
		env: concat(baseEnv, []corev1.EnvVar{
			fromSecret("GIT_SSH_PRIVATE_KEY", "ssh", "key"),
			{Name: "GIT_SSH_KNOWN_HOSTS", Value: "git.example ssh-ed25519 AAAA\n"},
		}),
	}, {
		name: "git source with its own known_hosts Secret and a GitHub Enterprise App",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.Git = &autov1alpha1.GitSource{URL: "ssh://git@git.example/infra.git", Ref: "main",
				Auth: &autov1alpha1.GitAuth{SSHPrivateKey: secretKey("ssh", "key"), KnownHosts: secretKey("ssh", "known_hosts"),
					GitHubApp: &autov1alpha1.GitHubAppAuth{AppID: secretKey("app", "id"), InstallationID: secretKey("app", "installation"),
						PrivateKey: secretKey("app", "key.pem"), APIURL: "https://ghe.example/api/v3"}}}
		}),
		opts: func(o *Options) { o.SSHKnownHosts = "ignored" },
		args: concat(baseArgs, []string{"--git-url=ssh://git@git.example/infra.git", "--git-ref=main"}),
		env: concat(baseEnv, []corev1.EnvVar{
			fromSecret("GIT_SSH_PRIVATE_KEY", "ssh", "key"),
			fromSecret("GIT_SSH_KNOWN_HOSTS", "ssh", "known_hosts"),
			fromSecret("GITHUB_APP_ID", "app", "id"),
			fromSecret("GITHUB_APP_INSTALLATION_ID", "app", "installation"),
			fromSecret("GITHUB_APP_PRIVATE_KEY", "app", "key.pem"),
			{Name: "GITHUB_APP_API_URL", Value: "https://ghe.example/api/v3"},
		}),
	}, {
		name: "flux source, custom image and port, extra args",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.Image = "registry.example.com/pulumi-nodejs:3.274.1"
			ws.Spec.ImagePullPolicy = corev1.PullAlways
			ws.Spec.ServiceAccountName = "deployer"
			ws.Spec.Flux = &autov1alpha1.FluxSource{
				Url:    "http://source-controller.flux-system.svc.cluster.local./gitrepository/flux-system/infra/abc.tar.gz",
				Digest: "sha256:2f7d6d6f7b2f0ab1a3c1d6f9d1b5a6d0e4f1c2b3a4d5e6f708192a3b4c5d6e7f",
				Dir:    "./app",
			}
		}),
		opts:       func(o *Options) { o.Port = 7000; o.ExtraArgs = []string{"--log-format=json", "-v=2"} },
		image:      "registry.example.com/pulumi-nodejs:3.274.1",
		pullPolicy: corev1.PullAlways,
		sa:         "deployer",
		args: []string{
			"--workdir=/share/workspace", "--listen=:7000", "--auth=token",
			"--artifact-url=http://source-controller.flux-system.svc.cluster.local./gitrepository/flux-system/infra/abc.tar.gz",
			"--artifact-digest=sha256:2f7d6d6f7b2f0ab1a3c1d6f9d1b5a6d0e4f1c2b3a4d5e6f708192a3b4c5d6e7f",
			"--dir=./app",
			"--log-format=json", "-v=2",
		},
	}, {
		name: "local source with pulumi log level",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.Local = &autov1alpha1.LocalSource{Dir: "/program"}
			ws.Spec.PulumiLogVerbosity = 9
		}),
		args: concat(baseArgs, []string{"--local-dir=/program", "--pulumi-log-level=9"}),
	}, {
		name: "no source",
		ws:   workspace(),
		args: baseArgs,
	}, {
		// The operator presents its own ServiceAccount token: no token
		// Secret, and the agent checks the caller against this Workspace.
		name: "kube agent auth",
		ws:   workspace(),
		opts: func(o *Options) { o.AgentAuth, o.TokenSecretName = AgentAuthKube, "" },
		args: []string{"--workdir=/share/workspace", "--listen=:50051",
			"--auth=kube", "--kube-audience=stackflow-agent", "--kube-workspace=infra/app"},
		env: baseEnv[1:],
	}, {
		name: "kube agent auth with another audience",
		ws:   workspace(),
		opts: func(o *Options) { o.AgentAuth, o.KubeAudience = AgentAuthKube, "agents.example.com" },
		args: []string{"--workdir=/share/workspace", "--listen=:50051",
			"--auth=kube", "--kube-audience=agents.example.com", "--kube-workspace=infra/app"},
		env: baseEnv[1:],
	}, {
		name: "lockdown default service account",
		ws:   workspace(),
		opts: func(o *Options) { o.DefaultServiceAccount = "workspace" },
		args: baseArgs,
		sa:   "workspace",
	}, {
		name: "a named service account wins over the default",
		ws:   workspace(func(ws *autov1alpha1.Workspace) { ws.Spec.ServiceAccountName = "deployer" }),
		opts: func(o *Options) { o.DefaultServiceAccount = "workspace" },
		args: baseArgs,
		sa:   "deployer",
	}, {
		name: "baseline profile",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.SecurityProfile = autov1alpha1.SecurityProfileBaseline
		}),
		args:        baseArgs,
		podSC:       baselinePod,
		containerSC: baselineContainer,
	}, {
		name: "explicit restricted profile",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.SecurityProfile = autov1alpha1.SecurityProfileRestricted
		}),
		args: baseArgs,
	}, {
		name: "resources override with ephemeral-storage and limits",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.Resources = corev1.ResourceRequirements{
				Requests: requests("cpu", "2", "ephemeral-storage", "10Gi"),
				Limits:   requests("memory", "256Mi", "ephemeral-storage", "20Gi"),
			}
		}),
		args: baseArgs,
		// memory has a limit but no request: Kubernetes requests the limit;
		// 512Mi would exceed it.
		resources: corev1.ResourceRequirements{
			Requests: requests("cpu", "2", "ephemeral-storage", "10Gi"),
			Limits:   requests("memory", "256Mi", "ephemeral-storage", "20Gi"),
		},
	}, {
		name: "resources override of one request",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.Resources = corev1.ResourceRequirements{Requests: requests("memory", "4Gi")}
		}),
		args: baseArgs,
		resources: corev1.ResourceRequirements{
			Requests: requests("cpu", "500m", "memory", "4Gi", "ephemeral-storage", "1Gi"),
		},
	}, {
		name: "env and envFrom",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.Env = []corev1.EnvVar{
				{Name: "PULUMI_CONFIG_PASSPHRASE", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: secretKey("passphrase", "value")}},
				{Name: "AWS_REGION", Value: "eu-west-1"},
				{Name: "HOME", Value: "/home/pulumi"},
			}
			ws.Spec.EnvFrom = []corev1.EnvFromSource{
				{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}},
				{Prefix: "CLOUD_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cloud"}}},
			}
		}),
		args: baseArgs,
		// spec.env's HOME replaces the operator's, keeping one definition.
		env: []corev1.EnvVar{
			baseEnv[0], baseEnv[1], baseEnv[3],
			fromSecret("PULUMI_CONFIG_PASSPHRASE", "passphrase", "value"),
			{Name: "AWS_REGION", Value: "eu-west-1"},
			{Name: "HOME", Value: "/home/pulumi"},
			// The agent redacts the values of variables set from Secrets.
			{Name: SecretEnvNamesVar, Value: "PULUMI_CONFIG_PASSPHRASE"},
		},
		envFrom: []corev1.EnvFromSource{
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}},
			{Prefix: "CLOUD_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cloud"}}},
		},
	}, {
		// The runtime read the envFrom Secrets' keys: their variables
		// (prefixed; keys that are no variable name, as 1X, are not set by the
		// kubelet) join the list, with spec.env's, sorted.
		name: "envFrom secret keys",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.Env = []corev1.EnvVar{{Name: "PULUMI_CONFIG_PASSPHRASE", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: secretKey("passphrase", "value")}}}
			ws.Spec.EnvFrom = []corev1.EnvFromSource{
				{Prefix: "CLOUD_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cloud"}}},
				{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}},
			}
		}),
		opts: func(o *Options) {
			o.EnvFromSecretKeys = map[string][]string{"cloud": {"KEY", "SECRET"}, "db": {"DB_PASSWORD", "not-a-name", "1X"}} // "1X" is no variable name
		},
		args: baseArgs,
		env: concat(baseEnv, []corev1.EnvVar{
			fromSecret("PULUMI_CONFIG_PASSPHRASE", "passphrase", "value"),
			{Name: SecretEnvNamesVar, Value: "CLOUD_KEY,CLOUD_SECRET,DB_PASSWORD,PULUMI_CONFIG_PASSPHRASE,not-a-name"},
		}),
		envFrom: []corev1.EnvFromSource{
			{Prefix: "CLOUD_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cloud"}}},
			{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}},
		},
	}, {
		name: "envFrom secret keys only",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}}
		}),
		opts:    func(o *Options) { o.EnvFromSecretKeys = map[string][]string{"db": {"DB_PASSWORD"}} },
		args:    baseArgs,
		env:     concat(baseEnv, []corev1.EnvVar{{Name: SecretEnvNamesVar, Value: "DB_PASSWORD"}}),
		envFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := testOpts
			if tt.opts != nil {
				tt.opts(&opts)
			}
			before := tt.ws.DeepCopy()
			sts, _, err := Build(tt.ws, opts)
			if err != nil {
				t.Fatal(err)
			}
			equal(t, "workspace after Build", tt.ws, before)

			defaults := func(got *string, def string) {
				if *got == "" {
					*got = def
				}
			}
			defaults(&tt.image, testOpts.DefaultPulumiImage)
			defaults(&tt.sa, "default")
			if tt.env == nil {
				tt.env = baseEnv
			}
			if tt.resources.Requests == nil && tt.resources.Limits == nil {
				tt.resources = defaultResources
			}
			if tt.podSC == nil {
				tt.podSC, tt.containerSC = restrictedPod, restrictedContainer
			}

			spec := sts.Spec.Template.Spec
			c := findContainer(t, spec.Containers, "pulumi")
			equal(t, "image", c.Image, tt.image)
			equal(t, "imagePullPolicy", c.ImagePullPolicy, tt.pullPolicy)
			equal(t, "args", c.Args, tt.args)
			equal(t, "env", c.Env, tt.env)
			equal(t, "envFrom", c.EnvFrom, tt.envFrom)
			equal(t, "resources", c.Resources, tt.resources)
			equal(t, "serviceAccountName", spec.ServiceAccountName, tt.sa)
			equal(t, "pod securityContext", spec.SecurityContext, tt.podSC)
			equal(t, "container securityContext", c.SecurityContext, tt.containerSC)
			equal(t, "bootstrap securityContext", findContainer(t, spec.InitContainers, "bootstrap").SecurityContext, tt.containerSC)
			port := opts.port()
			equal(t, "port", c.Ports[0].ContainerPort, port)
			equal(t, "readiness port", c.ReadinessProbe.GRPC.Port, port)
			equal(t, "startup port", c.StartupProbe.GRPC.Port, port)
		})
	}
}

// TestBuildDoesNotAlias checks that editing the returned objects leaves the
// Workspace alone (the controller may mutate what Build returns).
func TestBuildDoesNotAlias(t *testing.T) {
	ws := workspace(withGit, withPodTemplate, func(ws *autov1alpha1.Workspace) {
		ws.Spec.Env = []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: secretKey("s", "k")}}}
		ws.Spec.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}}}
		ws.Spec.Resources = corev1.ResourceRequirements{Requests: requests("cpu", "1")}
		ws.Spec.ServiceTemplate = &autov1alpha1.EmbeddedServiceTemplateSpec{Metadata: autov1alpha1.EmbeddedObjectMeta{
			Annotations: map[string]string{"a": "b"},
		}}
	})
	before := ws.DeepCopy()
	sts, svc, err := Build(ws, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	c := findContainer(t, sts.Spec.Template.Spec.Containers, "pulumi")
	for i := range c.Env {
		if c.Env[i].ValueFrom != nil && c.Env[i].ValueFrom.SecretKeyRef != nil {
			c.Env[i].ValueFrom.SecretKeyRef.Name = "changed"
		}
	}
	c.EnvFrom[0].SecretRef.Name = "changed"
	c.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("9")
	findContainer(t, sts.Spec.Template.Spec.InitContainers, "bootstrap").SecurityContext.ReadOnlyRootFilesystem = new(false)
	sts.Spec.Template.Labels["team"] = "changed"
	sts.Spec.Template.Spec.Tolerations[0].Key = "changed"
	svc.Annotations["a"] = "changed"
	equal(t, "workspace after editing the built objects", ws, before)
	if !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("init and workspace containers share a security context")
	}
}

// withPodTemplate adds a cache volume mounted in the pulumi container, a
// toleration, a node selector, a sidecar, and pod labels and annotations.
func withPodTemplate(ws *autov1alpha1.Workspace) {
	ws.Spec.PodTemplate = &autov1alpha1.EmbeddedPodTemplateSpec{
		Metadata: autov1alpha1.EmbeddedObjectMeta{
			Labels:      map[string]string{"team": "platform", LabelName: LabelNameValue},
			Annotations: map[string]string{"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"},
		},
		Spec: &corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:         "pulumi",
				VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/share/home/.cache"}},
				Env:          []corev1.EnvVar{{Name: "NPM_CONFIG_CACHE", Value: "/share/home/.cache/npm"}},
			}, {
				Name:  "proxy",
				Image: "ghcr.io/example/egress-proxy:1.2",
				Args:  []string{"--port=3128"},
			}},
			Volumes: []corev1.Volume{{
				Name:         "cache",
				VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}},
			}},
			Tolerations: []corev1.Toleration{{
				Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "pulumi", Effect: corev1.TaintEffectNoSchedule,
			}},
			NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
		},
	}
}

// TestBuildPodTemplate checks that spec.podTemplate is merged as a strategic
// merge patch: the pulumi container keeps everything generated and gains the
// mount and variable, volumes and containers are added, metadata merged.
func TestBuildPodTemplate(t *testing.T) {
	sts, _, err := Build(workspace(withGit, withPodTemplate), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	plain, _, err := Build(workspace(withGit), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, want := sts.Spec.Template, plain.Spec.Template.Spec.Containers[0]

	equal(t, "template labels", tmpl.Labels, map[string]string{
		"app.kubernetes.io/name":         "stackflow-workspace",
		"app.kubernetes.io/managed-by":   "stackflow",
		"auto.pulumi.com/workspace-name": "app",
		"team":                           "platform",
	})
	equal(t, "template annotations", tmpl.Annotations, map[string]string{
		"cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
		"kubectl.kubernetes.io/default-container":        "pulumi",
		AnnotationPodSpecHash:                            SpecHash(sts),
	})

	spec := tmpl.Spec
	if got := len(spec.Containers); got != 2 {
		t.Fatalf("containers: got %d, want pulumi and proxy", got)
	}
	c := spec.Containers[0]
	equal(t, "first container", c.Name, "pulumi")
	equal(t, "pulumi volumeMounts", c.VolumeMounts, []corev1.VolumeMount{
		{Name: "share", MountPath: "/share"},
		{Name: "tmp", MountPath: "/tmp"},
		{Name: "cache", MountPath: "/share/home/.cache"},
	})
	equal(t, "pulumi env", c.Env, concat(want.Env, []corev1.EnvVar{{Name: "NPM_CONFIG_CACHE", Value: "/share/home/.cache/npm"}}))
	// Everything else about the pulumi container is as generated.
	c.VolumeMounts, c.Env = want.VolumeMounts, want.Env
	equal(t, "rest of the pulumi container", c, want)

	equal(t, "sidecar", spec.Containers[1], corev1.Container{
		Name: "proxy", Image: "ghcr.io/example/egress-proxy:1.2", Args: []string{"--port=3128"},
	})
	equal(t, "volumes", spec.Volumes, []corev1.Volume{
		{Name: "share", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
	})
	equal(t, "tolerations", spec.Tolerations, []corev1.Toleration{{
		Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "pulumi", Effect: corev1.TaintEffectNoSchedule,
	}})
	equal(t, "nodeSelector", spec.NodeSelector, map[string]string{"kubernetes.io/os": "linux"})
	equal(t, "init containers", spec.InitContainers, plain.Spec.Template.Spec.InitContainers)
	equal(t, "securityContext", spec.SecurityContext, restrictedPod)
	equal(t, "serviceAccountName", spec.ServiceAccountName, "default")
	equal(t, "terminationGracePeriodSeconds", spec.TerminationGracePeriodSeconds, new(int64(300)))
}

// TestBuildPodTemplateOverrides checks that the pod template wins over the
// generated spec where both set a field.
func TestBuildPodTemplateOverrides(t *testing.T) {
	sts, _, err := Build(workspace(func(ws *autov1alpha1.Workspace) {
		ws.Spec.PodTemplate = &autov1alpha1.EmbeddedPodTemplateSpec{Spec: &corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64(900)),
			SecurityContext:               &corev1.PodSecurityContext{FSGroup: new(int64(2000))},
			Containers: []corev1.Container{{
				Name:      "pulumi",
				Resources: corev1.ResourceRequirements{Limits: requests("memory", "8Gi")},
			}},
		}}
	}), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	spec := sts.Spec.Template.Spec
	equal(t, "terminationGracePeriodSeconds", spec.TerminationGracePeriodSeconds, new(int64(900)))
	wantSC := restrictedPod.DeepCopy()
	wantSC.FSGroup = new(int64(2000))
	equal(t, "securityContext", spec.SecurityContext, wantSC)
	equal(t, "resources", spec.Containers[0].Resources, corev1.ResourceRequirements{
		Requests: defaultResources.Requests,
		Limits:   requests("memory", "8Gi"),
	})
}

// TestBuildServiceTemplate checks that the service template's metadata is
// merged onto the Service.
func TestBuildServiceTemplate(t *testing.T) {
	_, svc, err := Build(workspace(func(ws *autov1alpha1.Workspace) {
		ws.Spec.ServiceTemplate = &autov1alpha1.EmbeddedServiceTemplateSpec{Metadata: autov1alpha1.EmbeddedObjectMeta{
			Labels:      map[string]string{"team": "platform"},
			Annotations: map[string]string{"service.kubernetes.io/topology-mode": "Auto"},
		}}
	}), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "labels", svc.Labels, map[string]string{
		"app.kubernetes.io/name":         "stackflow-workspace",
		"app.kubernetes.io/managed-by":   "stackflow",
		"auto.pulumi.com/workspace-name": "app",
		"team":                           "platform",
	})
	equal(t, "annotations", svc.Annotations, map[string]string{"service.kubernetes.io/topology-mode": "Auto"})
	equal(t, "selector", svc.Spec.Selector, map[string]string{"auto.pulumi.com/workspace-name": "app"})
}

// TestBuildErrors checks that bad input is refused with a message naming what
// is wrong.
func TestBuildErrors(t *testing.T) {
	tests := []struct {
		name string
		ws   *autov1alpha1.Workspace
		opts func(*Options)
		want []string
	}{{
		name: "two sources",
		ws: workspace(withGit, func(ws *autov1alpha1.Workspace) {
			ws.Spec.Local = &autov1alpha1.LocalSource{Dir: "/p"}
		}),
		want: []string{"at most one program source"},
	}, {
		name: "git without ref",
		ws:   workspace(func(ws *autov1alpha1.Workspace) { ws.Spec.Git = &autov1alpha1.GitSource{URL: "https://x/y.git"} }),
		want: []string{"spec.git.ref is required"},
	}, {
		name: "git without url",
		ws:   workspace(func(ws *autov1alpha1.Workspace) { ws.Spec.Git = &autov1alpha1.GitSource{Ref: "main"} }),
		want: []string{"spec.git.url is required"},
	}, {
		name: "flux without digest",
		ws:   workspace(func(ws *autov1alpha1.Workspace) { ws.Spec.Flux = &autov1alpha1.FluxSource{Url: "http://a/b.tgz"} }),
		want: []string{"spec.flux.digest is required"},
	}, {
		name: "local without dir",
		ws:   workspace(func(ws *autov1alpha1.Workspace) { ws.Spec.Local = &autov1alpha1.LocalSource{} }),
		want: []string{"spec.local.dir is required"},
	}, {
		name: "git token without key",
		ws: workspace(withGit, func(ws *autov1alpha1.Workspace) {
			ws.Spec.Git.Auth.Token = secretKey("git-creds", "")
		}),
		want: []string{"spec.git.auth.token needs a secret name and key"},
	}, {
		name: "github app without private key",
		ws: workspace(withGit, func(ws *autov1alpha1.Workspace) {
			ws.Spec.Git.Auth = &autov1alpha1.GitAuth{GitHubApp: &autov1alpha1.GitHubAppAuth{
				AppID: secretKey("app", "id"), InstallationID: secretKey("app", "inst"),
			}}
		}),
		want: []string{"spec.git.auth.githubApp.privateKey is required"},
	}, {
		name: "unknown security profile",
		ws:   workspace(func(ws *autov1alpha1.Workspace) { ws.Spec.SecurityProfile = "privileged" }),
		want: []string{`spec.securityProfile "privileged"`},
	}, {
		name: "reserved env var",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.Env = []corev1.EnvVar{{Name: "STACKFLOW_AGENT_TOKEN", Value: "x"}}
		}),
		want: []string{"spec.env: STACKFLOW_AGENT_TOKEN is reserved"},
	}, {
		name: "name too long",
		ws:   workspace(func(ws *autov1alpha1.Workspace) { ws.Name = strings.Repeat("a", 43) }),
		want: []string{"is 43 characters long: at most 42"},
	}, {
		name: "name with a dot",
		ws:   workspace(func(ws *autov1alpha1.Workspace) { ws.Name = "my.app" }),
		want: []string{`workspace name "my.app" cannot name a Service`},
	}, {
		name: "no namespace",
		ws:   workspace(func(ws *autov1alpha1.Workspace) { ws.Namespace = "" }),
		want: []string{`workspace "app" has no namespace`},
	}, {
		name: "no image at all",
		ws:   workspace(),
		opts: func(o *Options) { o.DefaultPulumiImage = "" },
		want: []string{"spec.image is empty and the operator has no default Pulumi image"},
	}, {
		name: "options without agent image and token secret",
		ws:   workspace(),
		opts: func(o *Options) { o.AgentImage, o.TokenSecretName = "", "" },
		want: []string{"AgentImage is required", "TokenSecretName is required"},
	}, {
		name: "options with an unknown agent auth",
		ws:   workspace(),
		opts: func(o *Options) { o.AgentAuth = "mtls" },
		want: []string{`agent auth "mtls" is not one of "token", "kube"`},
	}, {
		name: "options with a bad port",
		ws:   workspace(),
		opts: func(o *Options) { o.Port = -1 },
		want: []string{"port -1 is out of range"},
	}, {
		name: "pod template container without name",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.PodTemplate = &autov1alpha1.EmbeddedPodTemplateSpec{Spec: &corev1.PodSpec{
				Containers: []corev1.Container{{Image: "busybox"}},
			}}
		}),
		want: []string{"spec.podTemplate.spec: containers[0] has no name"},
	}, {
		name: "pod template sidecar without image",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.PodTemplate = &autov1alpha1.EmbeddedPodTemplateSpec{Spec: &corev1.PodSpec{
				Containers: []corev1.Container{{Name: "sidecar"}},
			}}
		}),
		want: []string{`spec.podTemplate.spec: container "sidecar" has no image`},
	}, {
		name: "pod template mount of an undefined volume",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.PodTemplate = &autov1alpha1.EmbeddedPodTemplateSpec{Spec: &corev1.PodSpec{
				Containers: []corev1.Container{{Name: "pulumi", VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/c"}}}},
			}}
		}),
		want: []string{`container "pulumi" mounts volume "cache", which volumes does not define`},
	}, {
		name: "pod template volume mount without path",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.PodTemplate = &autov1alpha1.EmbeddedPodTemplateSpec{Spec: &corev1.PodSpec{
				Containers: []corev1.Container{{Name: "pulumi", VolumeMounts: []corev1.VolumeMount{{Name: "share"}}}},
			}}
		}),
		want: []string{"containers[0].volumeMounts[0] has no mountPath"},
	}, {
		name: "pod template changing the selector label",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.PodTemplate = &autov1alpha1.EmbeddedPodTemplateSpec{Metadata: autov1alpha1.EmbeddedObjectMeta{
				Labels: map[string]string{LabelWorkspaceName: "other"},
			}}
		}),
		want: []string{`spec.podTemplate.metadata.labels: label auto.pulumi.com/workspace-name is set by the operator to "app"`},
	}, {
		name: "pod template setting the hash annotation",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.PodTemplate = &autov1alpha1.EmbeddedPodTemplateSpec{Metadata: autov1alpha1.EmbeddedObjectMeta{
				Annotations: map[string]string{AnnotationPodSpecHash: "x"},
			}}
		}),
		want: []string{"spec.podTemplate.metadata.annotations: stackflow.io/pod-spec-hash is set by the operator"},
	}, {
		name: "service template changing a label",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.ServiceTemplate = &autov1alpha1.EmbeddedServiceTemplateSpec{Metadata: autov1alpha1.EmbeddedObjectMeta{
				Labels: map[string]string{LabelManagedBy: "helm"},
			}}
		}),
		want: []string{`spec.serviceTemplate.metadata.labels: label app.kubernetes.io/managed-by is set by the operator to "stackflow"`},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := testOpts
			if tt.opts != nil {
				tt.opts(&opts)
			}
			sts, svc, err := Build(tt.ws, opts)
			if err == nil {
				t.Fatal("Build succeeded, want an error")
			}
			if sts != nil || svc != nil {
				t.Error("Build returned objects with its error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestStacksDoNotChangeTheStatefulSet proves that a configuration-only change
// (spec.stacks) leaves the StatefulSet and its hash identical, so it never
// restarts the workspace.
func TestStacksDoNotChangeTheStatefulSet(t *testing.T) {
	base := workspace(withGit)
	withStacks := workspace(withGit, func(ws *autov1alpha1.Workspace) {
		ws.Spec.Stacks = []autov1alpha1.WorkspaceStack{{
			Name:            "org/app/prod",
			Create:          new(false),
			SecretsProvider: new("awskms://alias/prod"),
			Config: []autov1alpha1.ConfigItem{
				{Key: "aws:region", Value: &apiextensionsv1.JSON{Raw: []byte(`"eu-west-1"`)}},
				{Key: "app:db", ValueFrom: &autov1alpha1.ConfigValueFrom{Env: "DB_URL"}, Secret: new(true)},
			},
			Environment: []string{"org/prod"},
		}}
	})
	a, asvc, err := Build(base, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	b, bsvc, err := Build(withStacks, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	if SpecHash(a) != SpecHash(b) || a.Spec.Template.Annotations[AnnotationPodSpecHash] != b.Spec.Template.Annotations[AnnotationPodSpecHash] {
		t.Errorf("hash changed with spec.stacks: %s vs %s", SpecHash(a), SpecHash(b))
	}
	equal(t, "statefulset with and without spec.stacks", b, a)
	equal(t, "service with and without spec.stacks", bsvc, asvc)
}

// TestSpecHashChanges checks that every change to what runs in the pod changes
// the hash, and that the hash is stable otherwise.
func TestSpecHashChanges(t *testing.T) {
	base := func() *autov1alpha1.Workspace { return workspace(withGit) }
	baseSTS, _, err := Build(base(), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	baseHash := baseSTS.Spec.Template.Annotations[AnnotationPodSpecHash]
	if baseHash == "" || baseHash != SpecHash(baseSTS) {
		t.Fatalf("annotation %q, SpecHash %q", baseHash, SpecHash(baseSTS))
	}

	tests := []struct {
		name string
		ws   func(*autov1alpha1.Workspace)
		opts func(*Options)
		same bool
	}{
		{name: "image", ws: func(ws *autov1alpha1.Workspace) { ws.Spec.Image = "pulumi/pulumi:3.275.0-nonroot" }},
		{name: "imagePullPolicy", ws: func(ws *autov1alpha1.Workspace) { ws.Spec.ImagePullPolicy = corev1.PullAlways }},
		{name: "git dir", ws: func(ws *autov1alpha1.Workspace) { ws.Spec.Git.Dir = "" }},
		{name: "source kind", ws: func(ws *autov1alpha1.Workspace) {
			ws.Spec.Git, ws.Spec.Flux = nil, &autov1alpha1.FluxSource{Url: "http://a/b.tgz", Digest: "sha256:00"}
		}},
		{name: "env", ws: func(ws *autov1alpha1.Workspace) { ws.Spec.Env = []corev1.EnvVar{{Name: "A", Value: "1"}} }},
		{name: "envFrom", ws: func(ws *autov1alpha1.Workspace) {
			ws.Spec.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}}}
		}},
		{name: "resources", ws: func(ws *autov1alpha1.Workspace) {
			ws.Spec.Resources.Requests = requests("memory", "1Gi")
		}},
		{name: "security profile", ws: func(ws *autov1alpha1.Workspace) { ws.Spec.SecurityProfile = autov1alpha1.SecurityProfileBaseline }},
		{name: "service account", ws: func(ws *autov1alpha1.Workspace) { ws.Spec.ServiceAccountName = "deployer" }},
		{name: "log level", ws: func(ws *autov1alpha1.Workspace) { ws.Spec.PulumiLogVerbosity = 3 }},
		{name: "pod template", ws: withPodTemplate},
		{name: "agent image", opts: func(o *Options) { o.AgentImage = "ghcr.io/stackflow-io/stackflow:v0.2.0" }},
		{name: "extra args", opts: func(o *Options) { o.ExtraArgs = []string{"--debug"} }},
		{name: "port", opts: func(o *Options) { o.Port = 7000 }},
		{name: "token secret", opts: func(o *Options) { o.TokenSecretName = "other" }},
		{name: "kube agent auth", opts: func(o *Options) { o.AgentAuth = AgentAuthKube }},
		{name: "envFrom secret keys", ws: func(ws *autov1alpha1.Workspace) {
			ws.Spec.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}}
		}, opts: func(o *Options) { o.EnvFromSecretKeys = map[string][]string{"db": {"DB_PASSWORD"}} }},
		{name: "default service account", opts: func(o *Options) { o.DefaultServiceAccount = "workspace" }},

		{name: "nothing", ws: func(*autov1alpha1.Workspace) {}, same: true},
		// A new revision is checked out by the running agent, in place.
		{name: "git ref", ws: func(ws *autov1alpha1.Workspace) { ws.Spec.Git.Ref = "fedcba9876543210fedcba9876543210fedcba98" }, same: true},
		{name: "the default port spelled out", opts: func(o *Options) { o.Port = 50051 }, same: true},
		{name: "the default profile spelled out", ws: func(ws *autov1alpha1.Workspace) {
			ws.Spec.SecurityProfile = autov1alpha1.SecurityProfileRestricted
		}, same: true},
		{name: "default requests spelled out in another notation", ws: func(ws *autov1alpha1.Workspace) {
			ws.Spec.Resources.Requests = requests("cpu", "0.5", "memory", "0.5Gi", "ephemeral-storage", "1024Mi")
		}, same: true},
		{name: "service template", ws: func(ws *autov1alpha1.Workspace) {
			ws.Spec.ServiceTemplate = &autov1alpha1.EmbeddedServiceTemplateSpec{Metadata: autov1alpha1.EmbeddedObjectMeta{
				Labels: map[string]string{"a": "b"},
			}}
		}, same: true},
		{name: "workspace status and metadata", ws: func(ws *autov1alpha1.Workspace) {
			ws.Generation, ws.ResourceVersion = 7, "123"
			ws.Labels = map[string]string{"a": "b"}
			ws.Status.Address = "somewhere:1"
		}, same: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws, opts := base(), testOpts
			if tt.ws != nil {
				tt.ws(ws)
			}
			if tt.opts != nil {
				tt.opts(&opts)
			}
			sts, _, err := Build(ws, opts)
			if err != nil {
				t.Fatal(err)
			}
			got := sts.Spec.Template.Annotations[AnnotationPodSpecHash]
			if got != SpecHash(sts) {
				t.Errorf("annotation %s, SpecHash %s", got, SpecHash(sts))
			}
			if same := got == baseHash; same != tt.same {
				t.Errorf("hash %s, base %s: same = %v, want %v", got, baseHash, same, tt.same)
			}
		})
	}
}

// TestSpecHash checks SpecHash itself: it ignores its own annotation, sees any
// other template change, and is "" for nil.
func TestSpecHash(t *testing.T) {
	sts, _, err := Build(workspace(withGit), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	h := SpecHash(sts)
	if len(h) != 32 {
		t.Errorf("hash %q: want 32 hex digits", h)
	}
	c := sts.DeepCopy()
	c.Spec.Template.Annotations[AnnotationPodSpecHash] = "stale"
	c.Spec.Replicas = new(int32(0))
	c.Labels["x"] = "y"
	if SpecHash(c) != h {
		t.Error("hash depends on its own annotation or on fields outside the template")
	}
	delete(c.Spec.Template.Annotations, AnnotationPodSpecHash)
	if SpecHash(c) != h {
		t.Error("hash differs between a template without annotations and one with only the hash")
	}
	c.Spec.Template.Annotations["other"] = "x"
	if SpecHash(c) == h {
		t.Error("hash ignores a template annotation")
	}
	if SpecHash(nil) != "" {
		t.Error(`SpecHash(nil) is not ""`)
	}
}

func TestNameAndAddress(t *testing.T) {
	ws := workspace()
	equal(t, "Name", Name("app"), "app-workspace")
	equal(t, "Address", Address(ws, 50051), "app-workspace-0.app-workspace.infra:50051")
	equal(t, "Address default port", Address(ws, 0), "app-workspace-0.app-workspace.infra:50051")
	equal(t, "Address port", Address(ws, 7000), "app-workspace-0.app-workspace.infra:7000")

	sts, svc, err := Build(ws, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	// The address is the stable name of the StatefulSet's first pod under its
	// governing Service.
	want := sts.Name + "-0." + sts.Spec.ServiceName + "." + svc.Namespace + ":50051"
	equal(t, "Address from the objects", Address(ws, 0), want)
	equal(t, "service name", svc.Name, sts.Spec.ServiceName)
}

// TestRevisionArgs: the revision flags are what a new revision alone changes
// in the pod template; the artifact's too, and only the workspace container's.
func TestRevisionArgs(t *testing.T) {
	ws := workspace(withGit)
	sts, _, err := Build(ws, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	if got := RevisionArgs(sts); len(got) != 1 || got[0] != "--git-ref="+ws.Spec.Git.Ref {
		t.Fatalf("RevisionArgs = %q, want the git ref", got)
	}
	ws.Spec.Git, ws.Spec.Flux = nil, &autov1alpha1.FluxSource{Url: "http://a/b.tgz", Digest: "sha256:00"}
	flux, _, err := Build(ws, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	if got := RevisionArgs(flux); len(got) != 2 {
		t.Fatalf("RevisionArgs of an artifact = %q, want its URL and digest", got)
	}
	ws.Spec.Flux.Digest, ws.Spec.Flux.Url = "sha256:11", "http://a/c.tgz"
	flux2, _, err := Build(ws, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	if SpecHash(flux) != SpecHash(flux2) {
		t.Fatal("a new artifact revision changed the spec hash")
	}
	if got := WithoutRevision([]string{"--git-url=u", "--git-ref=abc", "--dir=d"}); strings.Join(got, " ") != "--git-url=u --git-ref= --dir=d" {
		t.Fatalf("WithoutRevision = %q", got)
	}
	// Another container's arguments are its own.
	side := sts.DeepCopy()
	side.Spec.Template.Spec.Containers = append(side.Spec.Template.Spec.Containers, corev1.Container{Name: "sidecar", Args: []string{"--git-ref=x"}})
	side2 := side.DeepCopy()
	side2.Spec.Template.Spec.Containers[len(side2.Spec.Template.Spec.Containers)-1].Args = []string{"--git-ref=y"}
	if SpecHash(side) == SpecHash(side2) {
		t.Fatal("a sidecar's --git-ref was left out of the hash")
	}
}
