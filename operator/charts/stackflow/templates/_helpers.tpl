{{/* The prefix of every object's name: the release name unless overridden. */}}
{{- define "stackflow.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- end }}

{{- define "stackflow.operatorName" -}}{{ include "stackflow.fullname" . }}-operator{{- end }}
{{- define "stackflow.analysisName" -}}{{ include "stackflow.fullname" . }}-analysis{{- end }}

{{/* Labels on every object. */}}
{{- define "stackflow.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: stackflow
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The operator pods' selector (NetworkPolicies select them too). */}}
{{- define "stackflow.operatorSelector" -}}
app.kubernetes.io/name: stackflow-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The pods of one operator shard: (list root shard); the default shard
("") keeps the chart's operator selector. */}}
{{- define "stackflow.operatorShardSelector" -}}
{{- $root := index . 0 -}}
{{- $shard := index . 1 -}}
{{- if $shard -}}
app.kubernetes.io/name: stackflow-operator-shard
app.kubernetes.io/instance: {{ $root.Release.Name }}
stackflow.io/shard: {{ $shard | quote }}
{{- else -}}
{{ include "stackflow.operatorSelector" $root }}
{{- end }}
{{- end }}

{{/* The pods of every operator shard, as a label selector's body. */}}
{{- define "stackflow.anyOperatorSelector" -}}
matchLabels:
  app.kubernetes.io/instance: {{ .Release.Name }}
matchExpressions:
  - key: app.kubernetes.io/name
    operator: In
    values: [stackflow-operator, stackflow-operator-shard]
{{- end }}

{{- define "stackflow.analysisSelector" -}}
app.kubernetes.io/name: stackflow-analysis
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "stackflow.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "stackflow.analysisImage" -}}
{{ .Values.analysis.image.repository }}:{{ .Values.analysis.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The namespaces workspace NetworkPolicies go to. */}}
{{- define "stackflow.workspaceNamespaces" -}}
{{- $ns := .Values.networkPolicies.workspaceNamespaces | default .Values.watchNamespaces -}}
{{- toJson (default (list) $ns) -}}
{{- end }}

{{/* What stackflow-analysis reads, through informers. */}}
{{- define "stackflow.analysisReadRules" -}}
- apiGroups: ["pulumi.com"]
  resources: ["stacks"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["auto.pulumi.com"]
  resources: ["updates"]
  verbs: ["get", "list", "watch"]
{{- end }}
