package exports

import (
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// The programs examples/chain names: programs/network's outputs, and
// programs/web reading them.
const (
	exampleNetwork = `name: network
runtime: yaml
resources:
  vpc:
    type: stackflowtest:index:Record
    properties:
      name: vpc
      content: vpc-1
outputs:
  vpcId: ${vpc.content}
  subnets:
    - ${vpc.content}-subnet-a
    - ${vpc.content}-subnet-b
  dbPassword:
    fn::secret: s3cret-db
`
	exampleWeb = `name: web
runtime: yaml
config:
  vpcId:
    type: string
  subnet:
    type: string
  dbPassword:
    type: string
    secret: true
resources:
  site:
    type: stackflowtest:index:Record
    properties:
      name: site
      content: web in ${vpcId}/${subnet} with ${dbPassword}
`
)

// exampleStack reads a Stack of examples/chain, pointed at repo and
// namespace ns, without its Pulumi Cloud token (the test's backend is a
// file:// one).
func exampleStack(t *testing.T, file, ns, repo string) *pulumiv1.Stack {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(substrate.RepoRoot(), "examples", "chain", file))
	if err != nil {
		t.Fatal(err)
	}
	var s pulumiv1.Stack
	if err := yaml.UnmarshalStrict(b, &s); err != nil {
		t.Fatalf("examples/chain/%s: %v", file, err)
	}
	s.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: s.Name, Annotations: s.Annotations}
	s.Spec.ProjectRepo = repo
	delete(s.Spec.EnvRefs, "PULUMI_ACCESS_TOKEN")
	return &s
}

// TestChainExample runs examples/chain's two Stacks as shipped (but for
// the repository and the token): app deploys with network's exported
// values, secret included, after network.
func TestChainExample(t *testing.T) {
	e := newEnv(t)
	operatortest.StartOperator(t, suite.CP.Config, e.Opts)
	repo := gitrepo.New(t)
	sha := repo.Commit(t, "programs", map[string]string{
		"programs/network/Pulumi.yaml": exampleNetwork, "programs/web/Pulumi.yaml": exampleWeb, ".gitignore": "Pulumi.*.yaml\n",
	})
	app := exampleStack(t, "app.yaml", e.NS, repo.URL())
	network := exampleStack(t, "network.yaml", e.NS, repo.URL())
	create(t, app)
	create(t, network)
	waitStack(t, network, "exported", exportedAt(sha))
	waitStack(t, app, "ready", readyAt(sha))
	if got, _ := e.PE.Record(t, "site"); got != "web in vpc-1/vpc-1-subnet-a with s3cret-db" {
		t.Fatalf("app's record %q: it did not read network's exports", got)
	}
	hNet := history(t, e, &gitrepo.Repo{Work: filepath.Join(repo.Work, "programs", "network")}, network.Spec.Stack)
	hApp := history(t, e, &gitrepo.Repo{Work: filepath.Join(repo.Work, "programs", "web")}, app.Spec.Stack)
	if len(hNet) != 1 || len(hApp) != 1 {
		t.Fatalf("updates: network %d, app %d; want one each", len(hNet), len(hApp))
	}
	before(t, "network before app", hNet[0], hApp[0])
}
