package main

import (
	"fmt"
	"os"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// installOptions say how --install and --uninstall reach the cluster.
type installOptions struct {
	kubeconfig      string
	createNamespace bool
	wait            bool
	timeout         time.Duration
}

// configuration is Helm's action configuration for a kubeconfig and the
// release namespace, its release records in Secrets (helm's default driver).
func (o installOptions) configuration(namespace string) (*action.Configuration, error) {
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &o.kubeconfig
	flags.Namespace = &namespace
	cfg := &action.Configuration{}
	logf := func(format string, v ...any) { fmt.Fprintf(os.Stderr, "helm: "+format+"\n", v...) }
	if err := cfg.Init(flags, namespace, "secret", logf); err != nil {
		return nil, fmt.Errorf("helm configuration: %w", err)
	}
	return cfg, nil
}

// install installs the chart as `helm install` does: the crds/ first (those
// already present are left as they are), then the templates, recorded as
// revision 1 of the release.
func install(o installOptions, chartDir, release, namespace string, valueFiles []string) error {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return fmt.Errorf("load chart: %w", err)
	}
	user, err := userValues(valueFiles)
	if err != nil {
		return err
	}
	cfg, err := o.configuration(namespace)
	if err != nil {
		return err
	}
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace = release, namespace
	in.CreateNamespace = o.createNamespace
	in.Wait, in.Timeout = o.wait, o.timeout
	rel, err := in.Run(ch, user)
	if err != nil {
		return fmt.Errorf("install %s: %w", release, err)
	}
	fmt.Printf("Installed release %s (revision %d, %s) in %s\n", rel.Name, rel.Version, rel.Info.Status, rel.Namespace)
	return nil
}

// uninstall removes a release's objects and its records, as `helm uninstall`.
func uninstall(o installOptions, release, namespace string) error {
	cfg, err := o.configuration(namespace)
	if err != nil {
		return err
	}
	un := action.NewUninstall(cfg)
	un.Wait, un.Timeout = o.wait, o.timeout
	if _, err := un.Run(release); err != nil {
		return fmt.Errorf("uninstall %s: %w", release, err)
	}
	fmt.Printf("Uninstalled release %s from %s\n", release, namespace)
	return nil
}
