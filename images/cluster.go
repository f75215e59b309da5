package images

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
)

// Names of the images of the single-node test cluster (test/framework/cluster).
const (
	PauseImage         = "stackflow-pause"
	TestWorkspaceImage = "stackflow-test-workspace"
	// NetprobePath is stackflow-netprobe in the test workspace image
	// (test/framework/netprobe/cmd/stackflow-netprobe).
	NetprobePath = "/usr/local/bin/stackflow-netprobe"
)

// TestWorkspacePaths locate the host binaries the test workspace image holds,
// from the substrate (hack/substrate.sh env).
type TestWorkspacePaths struct {
	// PulumiRoot is $STACKFLOW_PULUMI_ROOT (pulumi is in its bin/).
	PulumiRoot string
	// LanguageYAMLDir is $STACKFLOW_PULUMI_LANGUAGE_YAML (holding pulumi-language-yaml).
	LanguageYAMLDir string
}

// TestWorkspacePathsFromEnv reads TestWorkspacePaths from the substrate's
// environment variables.
func TestWorkspacePathsFromEnv() TestWorkspacePaths {
	return TestWorkspacePaths{
		PulumiRoot:      os.Getenv("STACKFLOW_PULUMI_ROOT"),
		LanguageYAMLDir: os.Getenv("STACKFLOW_PULUMI_LANGUAGE_YAML"),
	}
}

// pulumiBinDir is where the test workspace image keeps pulumi, its YAML
// language host and the test provider; it is on PATH, where Pulumi finds
// plugins that are not installed in PULUMI_HOME (which the pod runtime puts
// on an emptyDir, so nothing installed into the image's home would be seen).
const pulumiBinDir = "/pulumi/bin"

// Cluster returns the images of the single-node test cluster: the kubelet's
// pause image and a test workspace image. The workspace image is what a
// user's custom workspaceTemplate.spec.image would be: the agent (also at
// /agent, so the image serves as the operator's --agent-image too), pulumi
// and pulumi-language-yaml copied from the substrate, and the repository's
// test provider plugin. The substrate's pulumi binaries are the host's
// (dynamically linked against glibc), so that image is for the host's
// platform only and carries the host's glibc loader and libc.
func Cluster(p TestWorkspacePaths) ([]Spec, error) {
	pulumi := filepath.Join(p.PulumiRoot, "bin", "pulumi")
	yaml := filepath.Join(p.LanguageYAMLDir, "pulumi-language-yaml")
	var errs []error
	for _, f := range []string{pulumi, yaml} {
		if _, err := os.Stat(f); err != nil {
			errs = append(errs, fmt.Errorf("%w (run hack/substrate.sh pulumi pulumi-yaml, then eval \"$(hack/substrate.sh env)\")", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	files := []File{
		{Path: pulumiBinDir + "/pulumi", Source: pulumi, Mode: 0o755},
		{Path: pulumiBinDir + "/pulumi-language-yaml", Source: yaml, Mode: 0o755},
	}
	libs, err := dynamicLibraries(pulumi, yaml)
	if err != nil {
		return nil, err
	}
	files = append(files, libs...)
	return []Spec{
		{
			Name:        PauseImage,
			Description: "Sandbox (pause) container of Stackflow's single-node test cluster",
			Binaries:    []Binary{{Package: "./images/cmd/stackflow-pause", Path: "/pause"}},
			Entrypoint:  []string{"/pause"},
		},
		{
			Name:        TestWorkspaceImage,
			Description: "Stackflow test workspace: agent, pulumi, pulumi-language-yaml, the stackflowtest provider and stackflow-netprobe (tests only)",
			Binaries: []Binary{
				{Package: "./operator/cmd/agent", Path: agentPath},
				{Package: "./test/framework/provider/cmd/pulumi-resource-stackflowtest", Path: pulumiBinDir + "/pulumi-resource-stackflowtest"},
				// What a pod reaches, for the NetworkPolicy test.
				{Package: "./test/framework/netprobe/cmd/stackflow-netprobe", Path: NetprobePath},
			},
			Entrypoint: []string{agentPath},
			Cmd:        []string{"serve"},
			Env:        []string{"PATH=" + pulumiBinDir + ":/usr/local/bin:/usr/bin:/bin:/", "PULUMI_SKIP_UPDATE_CHECK=true"},
			Files:      files,
			Dirs:       []Dir{{Path: "/tmp", Mode: 0o1777}},
			// The pod runtime's restricted profile runs workspaces as
			// 1000:1000 (the user of Pulumi's own nonroot images), and pulumi
			// looks its user up when it creates a stack.
			Users: []Account{{Name: "pulumi", UID: 1000, GID: 1000, Home: "/share/home"}},
			// Host files: only the host's platform.
			Platforms: []string{"linux/amd64"},
		},
	}, nil
}

// dynamicLibraries returns the ELF interpreter and the libraries the
// executables need, read from the host, at the paths the loader looks for
// them (their host paths, symlinks resolved into regular files). The
// substrate's Go binaries need only glibc (libc.so.6 and the loader).
func dynamicLibraries(executables ...string) ([]File, error) {
	seen := map[string]bool{}
	var out []File
	add := func(path string) error {
		if seen[path] {
			return nil
		}
		seen[path] = true
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return fmt.Errorf("library %s: %w", path, err)
		}
		out = append(out, File{Path: path, Source: real, Mode: 0o755})
		return nil
	}
	for _, exe := range executables {
		f, err := elf.Open(exe)
		if err != nil {
			return nil, err
		}
		libs, err := f.ImportedLibraries()
		var interp string
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				b := make([]byte, p.Filesz)
				if _, err := p.ReadAt(b, 0); err == nil {
					interp = string(b[:len(b)-1]) // NUL-terminated
				}
			}
		}
		f.Close()
		if err != nil {
			return nil, err
		}
		if interp == "" {
			continue // static
		}
		if err := add(interp); err != nil {
			return nil, err
		}
		for _, lib := range libs {
			path, err := findLibrary(lib)
			if err != nil {
				return nil, fmt.Errorf("%s needs %s: %w", exe, lib, err)
			}
			if err := add(path); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// libraryDirs are where Debian's loader finds libraries without ld.so.cache.
var libraryDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

func findLibrary(name string) (string, error) {
	for _, d := range libraryDirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("not found in %v", libraryDirs)
}

// LocalRegistry is the registry part of the names under which archives are
// imported into containerd: no registry answers there, so the kubelet must
// find the image already present (imagePullPolicy IfNotPresent or Never).
const LocalRegistry = "stackflow.local"

// LocalRef is the name b is imported under: LocalRegistry/<name>:<version>.
func LocalRef(b Built) (name.Tag, error) {
	return name.NewTag(fmt.Sprintf("%s/%s:%s", LocalRegistry, b.Spec.Name, refName(b)))
}
