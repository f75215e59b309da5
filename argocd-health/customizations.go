package argocdhealth

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"sync"

	"github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	"github.com/argoproj/argo-cd/v2/util/lua"
	"github.com/argoproj/gitops-engine/pkg/health"
	yaml "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// scripts are the Lua sources, in Argo CD's resource_customizations layout.
//
//go:embed resource_customizations
var scripts embed.FS

const root = "resource_customizations"

// openLibs lists the kinds whose health script uses Lua's string library
// when Argo CD opens the standard libraries for it
// (resource.customizations.useOpenLibs.<group>_<Kind>). The scripts run without
// it too, with the same status; only their messages are less polished.
// Actions always run without the standard libraries in Argo CD.
var openLibs = map[string]bool{
	"pulumi.com/Stack":   true,
	"pulumi.com/Program": true,
}

// Customization is what Argo CD is given for one kind.
type Customization struct {
	// Group and Kind name the resource, e.g. pulumi.com and Stack.
	Group, Kind string
	// Health is the health script.
	Health string
	// UseOpenLibs opens Lua's standard libraries for the health script.
	UseOpenLibs bool
	// Actions are the resource actions, or nil.
	Actions *v1alpha1.ResourceActions
}

// Key is the kind's key among Argo CD's resource overrides: "pulumi.com/Stack".
func (c Customization) Key() string { return c.Group + "/" + c.Kind }

// ConfigMapSuffix is the kind as argocd-cm spells it in
// resource.customizations.<type>.<group>_<Kind> keys: "pulumi.com_Stack".
func (c Customization) ConfigMapSuffix() string { return c.Group + "_" + c.Kind }

// ActionsYAML is the value of resource.customizations.actions.<group>_<Kind>:
// the discovery script and the action definitions, as Argo CD reads them
// (v1alpha1.ResourceOverride.GetActions).
func (c Customization) ActionsYAML() (string, error) {
	if c.Actions == nil {
		return "", nil
	}
	defs := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, d := range c.Actions.Definitions {
		defs.Content = append(defs.Content, mapping("name", scalar(d.Name), "action.lua", block(d.ActionLua)))
	}
	b, err := render("", mapping("discovery.lua", block(c.Actions.ActionDiscoveryLua), "definitions", defs))
	if err != nil {
		return "", fmt.Errorf("actions of %s: %w", c.Key(), err)
	}
	return string(b), nil
}

// Customizations reads the embedded scripts, sorted by group and kind.
func Customizations() ([]Customization, error) {
	var out []Customization
	groups, err := fs.ReadDir(scripts, root)
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		kinds, err := fs.ReadDir(scripts, path.Join(root, g.Name()))
		if err != nil {
			return nil, err
		}
		for _, k := range kinds {
			c, err := readCustomization(g.Name(), k.Name())
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out, nil
}

func readCustomization(group, kind string) (Customization, error) {
	dir := path.Join(root, group, kind)
	c := Customization{Group: group, Kind: kind, UseOpenLibs: openLibs[group+"/"+kind]}
	b, err := fs.ReadFile(scripts, path.Join(dir, "health.lua"))
	if err != nil {
		return c, fmt.Errorf("%s/%s: %w", group, kind, err)
	}
	c.Health = string(b)
	discovery, err := fs.ReadFile(scripts, path.Join(dir, "actions", "discovery.lua"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return c, nil
		}
		return c, err
	}
	c.Actions = &v1alpha1.ResourceActions{ActionDiscoveryLua: string(discovery)}
	entries, err := fs.ReadDir(scripts, path.Join(dir, "actions"))
	if err != nil {
		return c, err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		script, err := fs.ReadFile(scripts, path.Join(dir, "actions", e.Name(), "action.lua"))
		if err != nil {
			return c, fmt.Errorf("action %s of %s/%s: %w", e.Name(), group, kind, err)
		}
		c.Actions.Definitions = append(c.Actions.Definitions, v1alpha1.ResourceActionDefinition{Name: e.Name(), ActionLua: string(script)})
	}
	return c, nil
}

// Overrides are the customizations as Argo CD holds them once it has read
// argocd-cm (util/settings GetResourceOverrides): keyed "pulumi.com/Stack".
func Overrides() (map[string]v1alpha1.ResourceOverride, error) {
	cs, err := Customizations()
	if err != nil {
		return nil, err
	}
	out := map[string]v1alpha1.ResourceOverride{}
	for _, c := range cs {
		actions, err := c.ActionsYAML()
		if err != nil {
			return nil, err
		}
		out[c.Key()] = v1alpha1.ResourceOverride{HealthLua: c.Health, UseOpenLibs: c.UseOpenLibs, Actions: actions}
	}
	return out, nil
}

// Health is the health Argo CD's application controller reports for obj with
// these customizations installed: gitops-engine's GetResourceHealth with the
// Lua overrides. Kinds without a customization get gitops-engine's built-in
// check, or nil.
func Health(obj *unstructured.Unstructured) (*health.HealthStatus, error) {
	overrides, err := cachedOverrides()
	if err != nil {
		return nil, err
	}
	return health.GetResourceHealth(obj, lua.ResourceHealthOverrides(overrides))
}

// cachedOverrides are read once for Health, which does not hand them out.
var cachedOverrides = sync.OnceValues(Overrides)
