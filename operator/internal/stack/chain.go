package stack

import (
	"fmt"
	"strings"

	"github.com/stackflow-io/stackflow/internal/stackref"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// Dependency says that Stack depends on Stack On (both in one namespace):
// On is its prerequisite, or exports an object it reads.
type Dependency struct {
	Stack, On string
	// Via is the object read ("ConfigMap net-outputs"), empty for a
	// prerequisite.
	Via string
}

func (d Dependency) String() string {
	if d.Via == "" {
		return fmt.Sprintf("%s lists %s as a prerequisite", d.Stack, d.On)
	}
	return fmt.Sprintf("%s reads %s, exported by %s", d.Stack, d.Via, d.On)
}

// Exported names the objects a Stack's spec.exports writes, as "Kind/name"
// (ExportKey).
func Exported(s *pulumiv1.Stack) []string {
	e := s.Spec.Exports
	if e == nil {
		return nil
	}
	var keys []string
	if e.ConfigMap != nil {
		keys = append(keys, ExportKey(stackref.KindConfigMap, e.ConfigMap.Name))
	}
	if e.Secret != nil {
		keys = append(keys, ExportKey(stackref.KindSecret, e.Secret.Name))
	}
	return keys
}

// ExportKey is "Kind/name" of an object, the key the exporters of an object
// are looked up by.
func ExportKey(kind, name string) string { return kind + "/" + name }

// Reads names the ConfigMaps and Secrets a Stack reads, as ExportKeys.
func Reads(s *pulumiv1.Stack) []string {
	refs := stackref.Refs(s)
	var keys []string
	for _, kind := range []string{stackref.KindConfigMap, stackref.KindSecret} {
		for _, n := range stackref.Names(refs, kind) {
			keys = append(keys, ExportKey(kind, n))
		}
	}
	return keys
}

// DependenciesOf lists what s depends on: its prerequisites, and the Stacks
// (other than itself) that export what it reads, as exporters returns them
// for an ExportKey.
func DependenciesOf(s *pulumiv1.Stack, exporters func(key string) []string) []Dependency {
	var deps []Dependency
	for _, p := range s.Spec.Prerequisites {
		deps = append(deps, Dependency{Stack: s.Name, On: p.Name})
	}
	for _, key := range Reads(s) {
		for _, by := range exporters(key) {
			if by != s.Name {
				deps = append(deps, Dependency{Stack: s.Name, On: by, Via: strings.Replace(key, "/", " ", 1)})
			}
		}
	}
	return deps
}

// maxChain bounds the walk of a dependency chain.
const maxChain = 256

// FindCycle returns the dependencies of a cycle through start (start
// depends on …, which depends on start), or nil. deps gives a Stack's
// dependencies; a Stack that does not exist has none. The walk visits each
// Stack once and at most maxChain of them.
func FindCycle(start string, deps func(name string) ([]Dependency, error)) ([]Dependency, error) {
	seen := map[string]bool{}
	var path []Dependency
	var walk func(name string) (bool, error)
	walk = func(name string) (bool, error) {
		if seen[name] || len(seen) >= maxChain {
			return false, nil
		}
		seen[name] = true
		ds, err := deps(name)
		if err != nil {
			return false, err
		}
		for _, d := range ds {
			path = append(path, d)
			if d.On == start {
				return true, nil
			}
			found, err := walk(d.On)
			if err != nil || found {
				return found, err
			}
			path = path[:len(path)-1]
		}
		return false, nil
	}
	found, err := walk(start)
	if err != nil || !found {
		return nil, err
	}
	return path, nil
}

// CycleMessage says a cycle in a Stack's condition.
func CycleMessage(cycle []Dependency) string {
	parts := make([]string, len(cycle))
	for i, d := range cycle {
		parts[i] = d.String()
	}
	return "dependency cycle: " + strings.Join(parts, "; ") + ": nothing runs until it is broken (remove a prerequisite, or stop reading an export)"
}
