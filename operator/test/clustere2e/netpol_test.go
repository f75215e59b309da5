//go:build cluster

package clustere2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/stackflow-io/stackflow/images"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// agentPort is the workspace agents' gRPC port (the chart's
// networkPolicies.agentPort).
const agentPort = 50051

// TestWorkspaceAgentsAreIsolatedByNetworkPolicy is the second half of issue
// 15's fifth end-to-end test: two Stacks in two namespaces, Ready through the
// in-process operator, and the NetworkPolicies the chart ships for workspace
// namespaces (rendered by helm-render, release namespace R), enforced by
// kube-network-policies. A probe pod in each workspace namespace dials the
// other namespace's agent: it connects before the policies exist and times
// out after, while, in the same rounds, it still connects to a pod in R (a
// pod no policy denies it), and a probe pod in R with the operator's labels
// (the peer the policy admits) reaches both agents. The in-process operator
// runs on the host as root, which kube-network-policies admits whatever the
// policies (its rule for node traffic: kubelet probes): a pushed commit is
// deployed to both Stacks with the policies in place.
func TestWorkspaceAgentsAreIsolatedByNetworkPolicy(t *testing.T) {
	ctx := context.Background()
	t.Logf("NetworkPolicy dataplane: kube-network-policies via %s", testCluster.NetworkPolicyDataplane())
	nss, stacks, repo := twoNamespaces(t)
	agents := make([]string, len(nss))
	for i, ns := range nss {
		p, err := testCluster.Client.CoreV1().Pods(ns).Get(ctx, pod.PodName("app"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		agents[i] = net.JoinHostPort(p.Status.PodIP, strconv.Itoa(agentPort))
	}

	// The chart's policies, with the operator in R.
	release := restrictedNamespace(t)
	policies := chartNetworkPolicies(t, release, nss)
	operatorLabels := admittedPeer(t, policies, nss[0])

	// The operator's peer in R listens on 8081, which the chart's operator
	// policy admits from anywhere (kubelet probes).
	const peerPort = 8081
	peer := probePod(t, release, "operator-peer", operatorLabels, "0.0.0.0:"+strconv.Itoa(peerPort),
		"agent-0="+agents[0], "agent-1="+agents[1])
	peerAddr := net.JoinHostPort(podIP(t, release, peer), strconv.Itoa(peerPort))
	probes := make([]string, len(nss))
	for i, ns := range nss {
		probes[i] = probePod(t, ns, "probe", nil, "", "other-agent="+agents[1-i], "r-peer="+peerAddr)
	}

	// Before the policies, everything connects: the probes and the network work.
	for i, ns := range nss {
		waitProbe(t, ns, probes[i], 1, time.Minute, "both connect without policies", func(r map[string]string) bool {
			return r["other-agent"] == "ok" && r["r-peer"] == "ok"
		})
	}

	start := time.Now()
	for _, np := range policies {
		if _, err := testCluster.Client.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating NetworkPolicy %s/%s: %v", np.Namespace, np.Name, err)
		}
	}
	// Each workspace namespace's probe: the other agent refused (timed out)
	// while R's peer connects, in three consecutive rounds.
	for i, ns := range nss {
		waitProbe(t, ns, probes[i], 3, time.Minute, "the other namespace's agent denied, R's peer reached", func(r map[string]string) bool {
			return r["other-agent"] != "ok" && r["r-peer"] == "ok"
		})
		t.Logf("%s: %s's agent (%s) denied %s after the policies were created", ns, nss[1-i], agents[1-i], time.Since(start).Round(time.Millisecond))
	}
	// The admitted peer still reaches both agents, in rounds after the denial.
	waitProbe(t, release, peer, 3, time.Minute, "both agents reached by the operator's peer", func(r map[string]string) bool {
		return r["agent-0"] == "ok" && r["agent-1"] == "ok"
	})
	for i, ns := range nss {
		last := lastRound(t, ns, probes[i])
		t.Logf("%s's probe, round %d: %v", ns, last.Round, last.Results)
	}

	// The in-process operator still drives both agents.
	sha2 := repo.Commit(t, "v2", map[string]string{"Pulumi.yaml": recordProgram, "README": "two"})
	for _, s := range stacks {
		waitStack(t, s, 3*time.Minute, "ready at the pushed commit", readyAt(sha2))
	}
}

// chartNetworkPolicies renders the chart with networkPolicies.enabled in
// release namespace ns, workspaces in workspaceNamespaces, and returns its
// NetworkPolicies.
func chartNetworkPolicies(t *testing.T, ns string, workspaceNamespaces []string) []*networkingv1.NetworkPolicy {
	t.Helper()
	values, err := yaml.Marshal(map[string]any{
		"watchNamespaces": workspaceNamespaces,
		"analysis":        map[string]any{"enabled": false},
		"networkPolicies": map[string]any{"enabled": true, "workspaceNamespaces": workspaceNamespaces},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, values, 0o644); err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(substrate.RepoRoot(), "operator", "charts", "stackflow")
	cmd := exec.Command(helmTool(t), "--chart", chart, "--release", "stackflow", "--namespace", ns, "--values", f)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm-render: %v\n%s", err, stderr.String())
	}
	var policies []*networkingv1.NetworkPolicy
	for _, doc := range strings.Split(string(out), "\n---") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("rendered document: %v\n%s", err, doc)
		}
		if meta.Kind != "NetworkPolicy" {
			continue
		}
		var np networkingv1.NetworkPolicy
		if err := yaml.Unmarshal([]byte(doc), &np); err != nil {
			t.Fatal(err)
		}
		if np.Namespace == "" {
			np.Namespace = ns
		}
		policies = append(policies, &np)
	}
	if len(policies) != len(workspaceNamespaces)+1 {
		t.Fatalf("the chart rendered %d NetworkPolicies, want one per workspace namespace and the operator's", len(policies))
	}
	return policies
}

// admittedPeer returns the pod labels the workspace policy of ns admits
// (the operator's), checking it admits them only from the release namespace
// and only on the agent port.
func admittedPeer(t *testing.T, policies []*networkingv1.NetworkPolicy, ns string) map[string]string {
	t.Helper()
	for _, np := range policies {
		if np.Namespace != ns {
			continue
		}
		if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 || len(np.Spec.Ingress[0].Ports) != 1 ||
			np.Spec.Ingress[0].Ports[0].Port.IntValue() != agentPort || np.Spec.Ingress[0].From[0].PodSelector == nil {
			t.Fatalf("workspace policy %s/%s: %+v, want one rule admitting the operator on %d", np.Namespace, np.Name, np.Spec.Ingress, agentPort)
		}
		return labelsSelectedBy(t, np.Spec.Ingress[0].From[0].PodSelector)
	}
	t.Fatalf("no NetworkPolicy rendered for %s", ns)
	return nil
}

// labelsSelectedBy are labels the selector selects: its matchLabels, and
// for each In expression its first value (the chart selects the operator
// pods of every shard: app.kubernetes.io/name In (stackflow-operator,
// stackflow-operator-shard)).
func labelsSelectedBy(t *testing.T, sel *metav1.LabelSelector) map[string]string {
	t.Helper()
	labels := map[string]string{}
	for k, v := range sel.MatchLabels {
		labels[k] = v
	}
	for _, e := range sel.MatchExpressions {
		if e.Operator != metav1.LabelSelectorOpIn || len(e.Values) == 0 {
			t.Fatalf("operator pod selector expression %+v: only In is expected", e)
		}
		labels[e.Key] = e.Values[0]
	}
	return labels
}

// probePod starts stackflow-netprobe (test workspace image) in ns with
// labels, listening on listen if set, dialing targets, and waits until it
// runs; it returns the pod's name.
func probePod(t *testing.T, ns, name string, labels map[string]string, listen string, targets ...string) string {
	t.Helper()
	ctx := context.Background()
	args := []string{"-timeout=2s", "-every=500ms"}
	if listen != "" {
		args = append(args, "-listen="+listen)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000)},
			Containers: []corev1.Container{{
				Name: "probe", Image: testImages.Workspace, ImagePullPolicy: corev1.PullNever,
				Command: []string{images.NetprobePath}, Args: append(args, targets...),
				SecurityContext: restrictedSecurityContext(),
			}},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
		},
	}
	if _, err := testCluster.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	substrate.Eventually(t, time.Minute, ns+"/"+name+" running", func() (bool, error) {
		got, err := testCluster.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if got.Status.Phase != corev1.PodRunning || got.Status.PodIP == "" {
			return false, fmt.Errorf("phase %s", got.Status.Phase)
		}
		return true, nil
	})
	return name
}

func podIP(t *testing.T, ns, name string) string {
	t.Helper()
	p, err := testCluster.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Status.PodIP
}

type probeRound struct {
	Round   int               `json:"round"`
	Results map[string]string `json:"results"`
}

// probeRounds reads the probe's rounds from its log (through the kubelet).
func probeRounds(ns, name string) ([]probeRound, error) {
	b, err := testCluster.Client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		return nil, err
	}
	var rounds []probeRound
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var r probeRound
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Results != nil {
			rounds = append(rounds, r)
		}
	}
	return rounds, nil
}

func lastRound(t *testing.T, ns, name string) probeRound {
	t.Helper()
	rounds, err := probeRounds(ns, name)
	if err != nil || len(rounds) == 0 {
		t.Fatalf("%s/%s: no rounds (%v)", ns, name, err)
	}
	return rounds[len(rounds)-1]
}

// waitProbe waits until the probe's last n rounds, all begun after this
// call, satisfy ok.
func waitProbe(t *testing.T, ns, name string, n int, timeout time.Duration, what string, ok func(map[string]string) bool) {
	t.Helper()
	after := -1
	substrate.Eventually(t, timeout, ns+"/"+name+": "+what, func() (bool, error) {
		rounds, err := probeRounds(ns, name)
		if err != nil {
			return false, err
		}
		if after < 0 {
			// Rounds already logged (or under way) may predate the change.
			after = len(rounds) + 1
			return false, nil
		}
		if len(rounds) < after+n {
			return false, fmt.Errorf("%d rounds so far", len(rounds))
		}
		for _, r := range rounds[len(rounds)-n:] {
			if !ok(r.Results) {
				return false, fmt.Errorf("round %d: %v", r.Round, r.Results)
			}
		}
		return true, nil
	})
}
