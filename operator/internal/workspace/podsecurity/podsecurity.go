// Package podsecurity decides, before a workspace pod is created, whether the
// Pod Security Standards level of its namespace admits it: the lockdown mode
// that refuses a Stack whose workspaceTemplate asks for more privilege than
// its namespace allows, with a message saying what and why, instead of a
// StatefulSet whose pods the API server silently refuses to create.
//
// It evaluates with Kubernetes' own checks (k8s.io/pod-security-admission).
package podsecurity

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// Mode is the operator's --pod-security-enforcement setting.
type Mode string

const (
	// ModeOff checks nothing: the API server's admission is the only check.
	ModeOff Mode = ""
	// ModeNamespace checks each workspace pod against its namespace's
	// pod-security.kubernetes.io/enforce level (an unlabelled namespace is
	// privileged, as in Kubernetes without an admission configuration).
	ModeNamespace Mode = "namespace"
	// ModeBaseline and ModeRestricted check against the stricter of that
	// level and the namespace's: a floor for unlabelled or laxer namespaces.
	ModeBaseline   Mode = "baseline"
	ModeRestricted Mode = "restricted"
)

// ParseMode validates a --pod-security-enforcement value ("off" is ModeOff).
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeOff, ModeNamespace, ModeBaseline, ModeRestricted:
		return m, nil
	case "off":
		return ModeOff, nil
	}
	return ModeOff, fmt.Errorf("pod security enforcement %q is not one of off, namespace, baseline, restricted", s)
}

// Checker evaluates pods; build one with New and share it.
type Checker struct {
	mode Mode
	eval policy.Evaluator
}

// New returns a Checker for mode.
func New(mode Mode) (*Checker, error) {
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		return nil, fmt.Errorf("pod security checks: %w", err)
	}
	return &Checker{mode: mode, eval: eval}, nil
}

// Enabled reports whether the checker checks anything.
func (c *Checker) Enabled() bool { return c != nil && c.mode != ModeOff }

// Level is the level a namespace's labels, with the mode's floor, require.
// A malformed label is the strictest level, as the admission plugin treats
// it.
func (c *Checker) Level(nsLabels map[string]string) psaapi.LevelVersion {
	lv := psaapi.LevelVersion{Level: psaapi.LevelPrivileged, Version: psaapi.LatestVersion()}
	if v, ok := nsLabels[psaapi.EnforceLevelLabel]; ok {
		lv.Level, _ = psaapi.ParseLevel(v) // restricted when malformed
	}
	if v, ok := nsLabels[psaapi.EnforceVersionLabel]; ok {
		lv.Version, _ = psaapi.ParseVersion(v) // latest when malformed
	}
	switch c.mode {
	case ModeBaseline:
		if lv.Level == psaapi.LevelPrivileged {
			lv.Level = psaapi.LevelBaseline
		}
	case ModeRestricted:
		lv.Level = psaapi.LevelRestricted
	}
	return lv
}

// Violation is what a pod does that its namespace's level forbids.
type Violation struct {
	Namespace string
	Level     psaapi.LevelVersion
	// Reasons are Kubernetes' own check reasons with their details, sorted,
	// e.g. `privileged (container "pulumi" must not set securityContext.privileged=true)`.
	Reasons []string
}

func (v *Violation) Error() string {
	return fmt.Sprintf("the workspace pod would violate PodSecurity %q of namespace %s: %s; "+
		"remove these settings from spec.workspaceTemplate (or use securityProfile: restricted)",
		v.Level.String(), v.Namespace, strings.Join(v.Reasons, "; "))
}

// Check returns a Violation when the pod's spec is not admitted at the
// level of its namespace, nil when it is (or when the checker is off).
func (c *Checker) Check(namespace string, nsLabels map[string]string, meta *metav1.ObjectMeta, spec *corev1.PodSpec) *Violation {
	if !c.Enabled() {
		return nil
	}
	lv := c.Level(nsLabels)
	if lv.Level == psaapi.LevelPrivileged {
		return nil
	}
	var reasons []string
	for _, r := range c.eval.EvaluatePod(lv, meta, spec) {
		if r.Allowed {
			continue
		}
		reason := r.ForbiddenReason
		if r.ForbiddenDetail != "" {
			reason += " (" + r.ForbiddenDetail + ")"
		}
		reasons = append(reasons, reason)
	}
	if len(reasons) == 0 {
		return nil
	}
	sort.Strings(reasons)
	return &Violation{Namespace: namespace, Level: lv, Reasons: reasons}
}
