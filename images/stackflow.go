package images

// The operator's workspace pods copy the agent out of the operator image
// with an init container running "/agent install /share/agent"
// (operator/internal/workspace/pod/container.go), and the operator's
// --agent-image flag names that image: the agent must stay at /agent.
const agentPath = "/agent"

// OperatorImage is the name of the operator image (the chart's image.repository
// ends with it).
const OperatorImage = "stackflow-operator"

// Stackflow returns the images this repository publishes. Issue 15's test
// workspace and pause images are meant to be one more entry each.
func Stackflow() []Spec {
	return []Spec{
		{
			Name:        OperatorImage,
			Description: "Stackflow operator (Pulumi Kubernetes Operator v2 API) and the workspace agent its pods copy from /agent",
			Binaries: []Binary{
				{Package: "./operator/cmd/operator", Path: "/operator"},
				{Package: "./operator/cmd/agent", Path: agentPath},
			},
			Entrypoint: []string{"/operator"},
			// The artifact store defaults to a directory under $TMPDIR;
			// with a read-only root filesystem an emptyDir is mounted here
			// instead (operator/config/manager/manager.yaml).
			Dirs:         []Dir{{Path: "/tmp", Mode: 0o1777}},
			ExposedPorts: []string{"8080/tcp", "8081/tcp", "9090/tcp"},
		},
		{
			Name:         "stackflow-analysis",
			Description:  "Stackflow verification service: did Stack X apply commit Y? (Argo Rollouts and Kargo)",
			Binaries:     []Binary{{Package: "./analysis/cmd/stackflow-analysis", Path: "/stackflow-analysis"}},
			Entrypoint:   []string{"/stackflow-analysis"},
			ExposedPorts: []string{"8080/tcp"},
		},
		{
			Name:        "stackflow-kargo",
			Description: "stackflow-kargo: Kargo promotion steps for Stacks (set-commit, wait, lint); the Akuity custom step image",
			Binaries:    []Binary{{Package: "./kargo-steps/cmd/stackflow-kargo", Path: "/stackflow-kargo"}},
			Entrypoint:  []string{"/stackflow-kargo"},
		},
	}
}
