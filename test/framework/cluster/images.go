package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/stackflow-io/stackflow/images"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// Images are the test cluster's images, built as OCI archives for import.
type Images struct {
	// Pause is the kubelet's sandbox image; Workspace the test workspace image
	// (agent at /agent, pulumi, pulumi-language-yaml, the test provider);
	// Operator the operator image (/operator and /agent), for installing the
	// chart.
	Pause, Workspace, Operator string
	// Archives are the OCI archives, for Options.Images.
	Archives []string
}

// BuildImages builds images.Cluster and the operator image for the host's
// platform into dir with the repository at moduleRoot, version "cluster" (the
// references do not change from commit to commit; the kubelet never pulls
// them). The operator adds one binary to the same go build (the agent is
// built once for both images).
func BuildImages(ctx context.Context, moduleRoot, dir string, logf func(string, ...any)) (Images, error) {
	if runtime.GOARCH != "amd64" {
		return Images{}, fmt.Errorf("the test workspace image holds the substrate's amd64 binaries; this is %s", runtime.GOARCH)
	}
	paths, err := substrate.Locate()
	if err != nil {
		return Images{}, err
	}
	specs, err := images.Cluster(images.TestWorkspacePaths{PulumiRoot: paths.PulumiRoot, LanguageYAMLDir: paths.LanguageYAML})
	if err != nil {
		return Images{}, err
	}
	op, err := images.Select(images.Stackflow(), []string{images.OperatorImage})
	if err != nil {
		return Images{}, err
	}
	specs = append(specs, op...)
	src, err := images.GitSource(ctx, moduleRoot, images.SourceDateEpoch())
	if err != nil {
		return Images{}, err
	}
	src.Version = "cluster"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Images{}, err
	}
	built, err := images.Build(ctx, images.Options{
		ModuleRoot: moduleRoot,
		Platforms:  []v1.Platform{{OS: "linux", Architecture: runtime.GOARCH}},
		Source:     src,
		SourceURL:  images.DefaultSourceURL,
		CABundle:   images.DefaultCABundle,
		WorkDir:    filepath.Join(dir, "work"),
		Logf:       logf,
		// Imported here, never published: gzip's fastest level takes about
		// a third of the default's time on these binaries.
		FastCompression: true,
	}, specs)
	if err != nil {
		return Images{}, err
	}
	var out Images
	for _, b := range built {
		ref, err := images.LocalRef(b)
		if err != nil {
			return Images{}, err
		}
		archive := filepath.Join(dir, b.Spec.Name+".tar")
		if err := images.WriteArchive(archive, b, ref); err != nil {
			return Images{}, err
		}
		out.Archives = append(out.Archives, archive)
		switch b.Spec.Name {
		case images.PauseImage:
			out.Pause = ref.Name()
		case images.TestWorkspaceImage:
			out.Workspace = ref.Name()
		case images.OperatorImage:
			out.Operator = ref.Name()
		}
	}
	_ = os.RemoveAll(filepath.Join(dir, "work"))
	return out, nil
}
