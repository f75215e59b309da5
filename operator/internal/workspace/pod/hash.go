package pod

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	appsv1 "k8s.io/api/apps/v1"
)

// SpecHash is a hash of sts's pod template, leaving out the
// AnnotationPodSpecHash annotation and the source revision the agent starts
// at (RevisionArgs): equal templates hash equal (maps are encoded in key
// order and quantities in canonical form), so a StatefulSet whose hash
// annotation matches what Build returns needs no new pod. A new revision
// alone does not replace the pod: the running agent checks it out in place.
// It is "" for a nil StatefulSet.
func SpecHash(sts *appsv1.StatefulSet) string {
	if sts == nil {
		return ""
	}
	tmpl := sts.Spec.Template.DeepCopy()
	delete(tmpl.Annotations, AnnotationPodSpecHash)
	for i, c := range tmpl.Spec.Containers {
		if c.Name == ContainerName {
			tmpl.Spec.Containers[i].Args = WithoutRevision(c.Args)
		}
	}
	data, err := json.Marshal(tmpl)
	if err != nil {
		// A pod template is plain data (no floats, channels or funcs), and
		// its MarshalJSON methods (quantities, times) cannot fail.
		panic("pod: encode pod template: " + err.Error())
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16])
}
