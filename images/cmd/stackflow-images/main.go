// Command stackflow-images builds Stackflow's OCI images (make images)
// without a Docker engine: multi-platform indexes written as OCI image
// layouts, pushed when --registry is given. Flags are parsed into
// images.Options; everything else lives in package images. See
// images/README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/stackflow-io/stackflow/images"
)

func main() {
	var (
		out, registry, version, platforms, names string
		set, archives                            string
		testPaths                                = images.TestWorkspacePathsFromEnv()
		opts                                     images.Options
	)
	flag.StringVar(&out, "out", "_build/images", "directory receiving one OCI image layout per image, <out>/<name>")
	flag.StringVar(&registry, "registry", "", "push every image as <registry>/<name>:<version> (e.g. ghcr.io/stackflow-io) with the default keychain (~/.docker/config.json, credential helpers); empty: do not push")
	flag.StringVar(&version, "version", "", "image version: the tag pushed, org.opencontainers.image.version and main.version of the binaries (default: git describe --always --dirty)")
	flag.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated platforms of every index")
	flag.StringVar(&names, "images", "", "comma-separated images to build (default: all of the set)")
	flag.StringVar(&set, "set", "stackflow", "image set: stackflow (the published images) or cluster (the test cluster's pause and test workspace images; linux/amd64 only)")
	flag.StringVar(&archives, "archives", "", "also write <dir>/<name>.tar, an OCI archive named "+images.LocalRegistry+"/<name>:<version> for `ctr -n k8s.io images import`")
	flag.StringVar(&testPaths.PulumiRoot, "pulumi-root", testPaths.PulumiRoot, "cluster set: directory with bin/pulumi (default $STACKFLOW_PULUMI_ROOT)")
	flag.StringVar(&testPaths.LanguageYAMLDir, "pulumi-language-yaml", testPaths.LanguageYAMLDir, "cluster set: directory with pulumi-language-yaml (default $STACKFLOW_PULUMI_LANGUAGE_YAML)")
	flag.StringVar(&opts.ModuleRoot, "module-root", ".", "repository root: go build and git run here")
	flag.StringVar(&opts.CABundle, "ca-bundle", images.DefaultCABundle, "host CA bundle copied into every image at "+images.CABundlePath+" (Debian's ca-certificates)")
	flag.StringVar(&opts.SourceURL, "source-url", images.DefaultSourceURL, "org.opencontainers.image.source")
	flag.StringVar(&opts.Licenses, "licenses", "", "org.opencontainers.image.licenses, an SPDX expression (empty: label left out; the repository has no LICENSE file yet)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), `Usage: stackflow-images [flags]

Builds the images %s
for every platform (go build, CGO_ENABLED=0, -trimpath) on a scratch base with
a CA bundle and the nonroot user 65532:65532, writes each as a multi-platform
OCI index in an OCI image layout under --out, and pushes it with --registry.
Timestamps come from $SOURCE_DATE_EPOCH or the commit's time, so building a
commit twice gives the same digests. See images/README.md.

Flags:
`, strings.Join(imageNames(), ", "))
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "stackflow-images: unexpected arguments %q\n", flag.Args())
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var all []images.Spec
	switch set {
	case "stackflow":
		all = images.Stackflow()
	case "cluster":
		var err error
		if all, err = images.Cluster(testPaths); err != nil {
			fmt.Fprintln(os.Stderr, "stackflow-images:", err)
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "stackflow-images: unknown --set %q (stackflow or cluster)\n", set)
		os.Exit(2)
	}
	if err := run(ctx, opts, all, out, archives, registry, version, platforms, names); err != nil {
		fmt.Fprintln(os.Stderr, "stackflow-images:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, opts images.Options, all []images.Spec, out, archives, registry, version, platforms, names string) error {
	var err error
	if opts.Platforms, err = images.ParsePlatforms(platforms); err != nil {
		return err
	}
	var selected []string
	for _, n := range strings.Split(names, ",") {
		if n = strings.TrimSpace(n); n != "" {
			selected = append(selected, n)
		}
	}
	specs, err := images.Select(all, selected)
	if err != nil {
		return err
	}
	if opts.Source, err = images.GitSource(ctx, opts.ModuleRoot, images.SourceDateEpoch()); err != nil {
		return err
	}
	if version != "" {
		opts.Source.Version = version
	}
	opts.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	built, err := images.Build(ctx, opts, specs)
	if err != nil {
		return err
	}
	for _, b := range built {
		path, err := images.WriteLayout(out, b)
		if err != nil {
			return err
		}
		digest, err := b.Index.Digest()
		if err != nil {
			return err
		}
		sizes, err := images.Sizes(b)
		if err != nil {
			return err
		}
		var s []string
		for _, ps := range sizes {
			s = append(s, fmt.Sprintf("%s %.1f MB (%.1f MB unpacked)", ps.Platform, float64(ps.Compressed)/1e6, float64(ps.Uncompressed)/1e6))
		}
		fmt.Printf("%s %s %s: %s\n", b.Spec.Name, digest, path, strings.Join(s, ", "))
		if archives != "" {
			ref, err := images.LocalRef(b)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(archives, 0o755); err != nil {
				return err
			}
			tarball := filepath.Join(archives, b.Spec.Name+".tar")
			if err := images.WriteArchive(tarball, b, ref); err != nil {
				return err
			}
			fmt.Printf("%s archive %s (imports as %s)\n", b.Spec.Name, tarball, ref.Name())
		}
		if registry != "" {
			ref, err := images.Push(ctx, registry, b)
			if err != nil {
				return err
			}
			fmt.Printf("%s pushed as %s@%s\n", b.Spec.Name, ref, digest)
		}
	}
	return nil
}

func imageNames() []string {
	var n []string
	for _, s := range images.Stackflow() {
		n = append(n, s.Name)
	}
	return n
}
