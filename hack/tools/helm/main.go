// Command helm-render renders a Helm chart as `helm template` does, with the
// Helm SDK, for the chart tests (operator/test/install), and installs it into
// a cluster as `helm install` does (operator/test/clustere2e). It lives in a module
// of its own: helm.sh/helm/v3 v3.22.0 requires k8s.io/* v0.37 and kustomize
// v0.21, which would lift the main module's k8s v0.35 pins (controller-runtime
// v0.23's line) and some thirty other modules.
//
//	helm-render --chart DIR [--release NAME] [--namespace NS] [--values FILE]... [--include-crds]
//	helm-render --lint --chart DIR [--values FILE]...
//	helm-render --install --kubeconfig FILE --chart DIR [--release NAME] [--namespace NS] [--values FILE]... [--create-namespace] [--wait] [--timeout D]
//	helm-render --uninstall --kubeconfig FILE [--release NAME] [--namespace NS] [--wait] [--timeout D]
//
// The manifests go to stdout as one YAML stream, each document preceded by a
// "# Source: <template>" comment, ordered by template path. --lint runs
// `helm lint`'s checks instead, printing each finding and failing on any
// warning or error. --install and --uninstall use Helm's install and
// uninstall actions against the kubeconfig's cluster (release records in
// Secrets of the release namespace, as the helm CLI keeps them).
package main

import (
	"flag"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"sigs.k8s.io/yaml"
)

type files []string

func (f *files) String() string     { return strings.Join(*f, ",") }
func (f *files) Set(v string) error { *f = append(*f, v); return nil }

func main() {
	var (
		chartDir    = flag.String("chart", "", "chart directory")
		release     = flag.String("release", "stackflow", "release name")
		namespace   = flag.String("namespace", "stackflow-system", "release namespace")
		includeCRDs = flag.Bool("include-crds", false, "also print the chart's crds/")
		lintOnly    = flag.Bool("lint", false, "lint the chart instead of rendering it")
		doInstall   = flag.Bool("install", false, "install the chart into the cluster of --kubeconfig instead of rendering it")
		doUninstall = flag.Bool("uninstall", false, "uninstall the release from the cluster of --kubeconfig")
		values      files
		inst        installOptions
	)
	flag.StringVar(&inst.kubeconfig, "kubeconfig", "", "--install, --uninstall: the cluster's kubeconfig")
	flag.BoolVar(&inst.createNamespace, "create-namespace", false, "--install: create the release namespace")
	flag.BoolVar(&inst.wait, "wait", false, "--install, --uninstall: wait for the objects to be ready (or gone)")
	flag.DurationVar(&inst.timeout, "timeout", 5*time.Minute, "--install, --uninstall: how long --wait waits")
	flag.Var(&values, "values", "values file (repeatable; later files win)")
	flag.Parse()
	if (*doInstall || *doUninstall) && inst.kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "helm-render: --install and --uninstall need --kubeconfig")
		os.Exit(2)
	}
	switch {
	case *doInstall:
		if err := install(inst, *chartDir, *release, *namespace, values); err != nil {
			fmt.Fprintln(os.Stderr, "helm-render:", err)
			os.Exit(1)
		}
		return
	case *doUninstall:
		if err := uninstall(inst, *release, *namespace); err != nil {
			fmt.Fprintln(os.Stderr, "helm-render:", err)
			os.Exit(1)
		}
		return
	}
	if *lintOnly {
		if err := lintChart(*chartDir, *namespace, values); err != nil {
			fmt.Fprintln(os.Stderr, "helm-render:", err)
			os.Exit(1)
		}
		return
	}
	if err := render(os.Stdout, *chartDir, *release, *namespace, values, *includeCRDs); err != nil {
		fmt.Fprintln(os.Stderr, "helm-render:", err)
		os.Exit(1)
	}
}

// userValues merges the values files, later files winning.
func userValues(valueFiles []string) (map[string]any, error) {
	user := map[string]any{}
	for _, f := range valueFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		m := map[string]any{}
		if err := yaml.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("values %s: %w", f, err)
		}
		user = chartutil.CoalesceTables(m, user) // m wins over earlier files
	}
	return user, nil
}

func lintChart(chartDir, namespace string, valueFiles []string) error {
	user, err := userValues(valueFiles)
	if err != nil {
		return err
	}
	linter := lint.All(chartDir, user, namespace, false)
	bad := 0
	for _, m := range linter.Messages {
		fmt.Println(m.Error())
		if m.Severity >= support.WarningSev {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d lint warnings or errors", bad)
	}
	return nil
}

func render(out *os.File, chartDir, release, namespace string, valueFiles []string, includeCRDs bool) error {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return fmt.Errorf("load chart: %w", err)
	}
	user, err := userValues(valueFiles)
	if err != nil {
		return err
	}
	if err := chartutil.ProcessDependenciesWithMerge(ch, user); err != nil {
		return err
	}
	vals, err := chartutil.ToRenderValues(ch, user, chartutil.ReleaseOptions{
		Name: release, Namespace: namespace, Revision: 1, IsInstall: true,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		return fmt.Errorf("values: %w", err)
	}
	rendered, err := engine.Render(ch, vals)
	if err != nil {
		return fmt.Errorf("render: %w", err)
	}
	var names []string
	for name, body := range rendered {
		// NOTES.txt and partials (_helpers.tpl) are not manifests.
		if strings.HasSuffix(name, "NOTES.txt") || strings.HasPrefix(path.Base(name), "_") || strings.TrimSpace(body) == "" {
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	if includeCRDs {
		for _, crd := range ch.CRDObjects() {
			fmt.Fprintf(out, "---\n# Source: %s\n%s\n", crd.Filename, strings.TrimSpace(string(crd.File.Data)))
		}
	}
	for _, name := range names {
		fmt.Fprintf(out, "---\n# Source: %s\n%s\n", name, strings.TrimSpace(rendered[name]))
	}
	return nil
}
