package kargo

import (
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// hook is one webhook of Kargo's chart (charts/kargo/templates/
// kubernetes-webhooks-server/webhooks.yaml at v1.11.2): its name, the server
// path, and what it intercepts.
type hook struct {
	name, path  string
	group       string
	resources   []string
	operations  []admissionv1.OperationType
	scope       admissionv1.ScopeType
	sideEffects admissionv1.SideEffectClass
	failure     admissionv1.FailurePolicyType
	// replicated marks the replicated-resource hooks, limited to Secrets and
	// ConfigMaps replicated into project namespaces.
	replicated bool
}

var (
	createUpdate       = []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}
	createUpdateDelete = []admissionv1.OperationType{admissionv1.Create, admissionv1.Update, admissionv1.Delete}
)

// mutatingHooks and validatingHooks are the chart's, in its order.
var mutatingHooks = []hook{
	{name: "freight.kargo.akuity.io", path: "/mutate-kargo-akuity-io-v1alpha1-freight", resources: []string{"freights"}, operations: createUpdate, scope: admissionv1.NamespacedScope},
	{name: "promotion.kargo.akuity.io", path: "/mutate-kargo-akuity-io-v1alpha1-promotion", resources: []string{"promotions"}, operations: createUpdate, scope: admissionv1.NamespacedScope},
	{name: "stage.kargo.akuity.io", path: "/mutate-kargo-akuity-io-v1alpha1-stage", resources: []string{"stages"}, operations: createUpdate, scope: admissionv1.NamespacedScope},
	{name: "warehouse.kargo.akuity.io", path: "/mutate-kargo-akuity-io-v1alpha1-warehouse", resources: []string{"warehouses"}, operations: createUpdate, scope: admissionv1.NamespacedScope},
}

var validatingHooks = []hook{
	{name: "clusterconfig.kargo.akuity.io", path: "/validate-kargo-akuity-io-v1alpha1-clusterconfig", resources: []string{"clusterconfigs"}, operations: createUpdate, scope: admissionv1.ClusterScope},
	{name: "clusterpromotiontask.kargo.akuity.io", path: "/validate-kargo-akuity-io-v1alpha1-clusterpromotiontask", resources: []string{"clusterpromotiontasks"}, operations: createUpdate, scope: admissionv1.ClusterScope},
	{name: "freight.kargo.akuity.io", path: "/validate-kargo-akuity-io-v1alpha1-freight", resources: []string{"freights", "freights/status"}, operations: createUpdateDelete, scope: admissionv1.NamespacedScope},
	{name: "project.kargo.akuity.io", path: "/validate-kargo-akuity-io-v1alpha1-project", resources: []string{"projects"}, operations: createUpdate, scope: admissionv1.ClusterScope, sideEffects: admissionv1.SideEffectClassNoneOnDryRun},
	{name: "projectconfig.kargo.akuity.io", path: "/validate-kargo-akuity-io-v1alpha1-projectconfig", resources: []string{"projectconfigs"}, operations: createUpdate, scope: admissionv1.NamespacedScope, sideEffects: admissionv1.SideEffectClassNoneOnDryRun},
	{name: "promotion.kargo.akuity.io", path: "/validate-kargo-akuity-io-v1alpha1-promotion", resources: []string{"promotions"}, operations: createUpdateDelete, scope: admissionv1.NamespacedScope},
	{name: "promotiontask.kargo.akuity.io", path: "/validate-kargo-akuity-io-v1alpha1-promotiontask", resources: []string{"promotiontasks"}, operations: createUpdate, scope: admissionv1.NamespacedScope},
	{name: "stage.kargo.akuity.io", path: "/validate-kargo-akuity-io-v1alpha1-stage", resources: []string{"stages"}, operations: createUpdate, scope: admissionv1.NamespacedScope},
	{name: "warehouse.kargo.akuity.io", path: "/validate-kargo-akuity-io-v1alpha1-warehouse", resources: []string{"warehouses"}, operations: createUpdate, scope: admissionv1.NamespacedScope},
	{name: "replicated-resource-mutate.kargo.akuity.io", path: "/validate-v1-replicated-resource", group: "", resources: []string{"secrets", "configmaps"}, operations: createUpdate, scope: admissionv1.NamespacedScope, replicated: true},
	{name: "replicated-resource-delete.kargo.akuity.io", path: "/validate-v1-replicated-resource", group: "", resources: []string{"secrets", "configmaps"}, operations: []admissionv1.OperationType{admissionv1.Delete}, scope: admissionv1.NamespacedScope, replicated: true, failure: admissionv1.Ignore},
}

// webhookParts is what a mutating and a validating webhook share, with the
// client config pointing at the (service) path envtest rewrites to its
// loopback URL and CA.
func (h hook) parts() (admissionv1.WebhookClientConfig, []admissionv1.RuleWithOperations, admissionv1.SideEffectClass, admissionv1.FailurePolicyType, *metav1.LabelSelector, *metav1.LabelSelector) {
	path := h.path
	cc := admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{Namespace: Namespace, Name: "kargo-webhooks-server", Path: &path}}
	group := "kargo.akuity.io"
	version := "v1alpha1"
	if h.replicated {
		group, version = h.group, "v1"
	}
	scope := h.scope
	rules := []admissionv1.RuleWithOperations{{Operations: h.operations, Rule: admissionv1.Rule{
		APIGroups: []string{group}, APIVersions: []string{version}, Resources: h.resources, Scope: &scope}}}
	se := h.sideEffects
	if se == "" {
		se = admissionv1.SideEffectClassNone
	}
	fp := h.failure
	if fp == "" {
		fp = admissionv1.Fail
	}
	var objSel, nsSel *metav1.LabelSelector
	if h.replicated {
		objSel = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "kargo.akuity.io/replicated-from", Operator: metav1.LabelSelectorOpExists}}}
		nsSel = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "kargo.akuity.io/project", Operator: metav1.LabelSelectorOpExists}}}
	}
	return cc, rules, se, fp, objSel, nsSel
}

// webhookConfigurations are Kargo's MutatingWebhookConfiguration and
// ValidatingWebhookConfiguration `kargo`, as its chart registers them.
func webhookConfigurations() (*admissionv1.MutatingWebhookConfiguration, *admissionv1.ValidatingWebhookConfiguration) {
	versions := []string{"v1"}
	m := &admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "kargo"}}
	m.SetGroupVersionKind(admissionv1.SchemeGroupVersion.WithKind("MutatingWebhookConfiguration"))
	for _, h := range mutatingHooks {
		cc, rules, se, fp, objSel, nsSel := h.parts()
		m.Webhooks = append(m.Webhooks, admissionv1.MutatingWebhook{Name: h.name, AdmissionReviewVersions: versions, SideEffects: &se,
			ClientConfig: cc, Rules: rules, FailurePolicy: &fp, ObjectSelector: objSel, NamespaceSelector: nsSel})
	}
	v := &admissionv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "kargo"}}
	v.SetGroupVersionKind(admissionv1.SchemeGroupVersion.WithKind("ValidatingWebhookConfiguration"))
	for _, h := range validatingHooks {
		cc, rules, se, fp, objSel, nsSel := h.parts()
		v.Webhooks = append(v.Webhooks, admissionv1.ValidatingWebhook{Name: h.name, AdmissionReviewVersions: versions, SideEffects: &se,
			ClientConfig: cc, Rules: rules, FailurePolicy: &fp, ObjectSelector: objSel, NamespaceSelector: nsSel})
	}
	return m, v
}
