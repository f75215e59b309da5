package stack

import (
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/export"
)

// ExportMappings are spec.exports' keys as export.Render takes them.
func ExportMappings(e *pulumiv1.StackExports) []export.Mapping {
	var ms []export.Mapping
	for _, o := range []struct {
		obj *pulumiv1.ExportObject
		to  export.Target
	}{{e.ConfigMap, export.ConfigMap}, {e.Secret, export.Secret}} {
		if o.obj == nil {
			continue
		}
		for _, k := range o.obj.Keys {
			ms = append(ms, export.Mapping{Key: k.Key, Output: k.Output, Path: k.Path, To: o.to})
		}
	}
	return ms
}
