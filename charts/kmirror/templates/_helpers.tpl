{{/*
Name of the application (label app.kubernetes.io/name).
*/}}
{{- define "kmirror.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Release-qualified name: fullnameOverride, else the release name when it already contains the
name, else release-name.
*/}}
{{- define "kmirror.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Name of the operator's Deployment, Role, bindings and (by default) ServiceAccount and Lease.
*/}}
{{- define "kmirror.operatorName" -}}
{{- printf "%s-operator" (include "kmirror.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Cluster-scoped objects carry the namespace: two releases of the same name cannot collide.
*/}}
{{- define "kmirror.clusterRoleName" -}}
{{- printf "%s-%s" (include "kmirror.operatorName" .) .Release.Namespace | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kmirror.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kmirror.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kmirror.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "kmirror.labels" -}}
helm.sh/chart: {{ include "kmirror.chart" . }}
{{ include "kmirror.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kmirror
{{- end }}

{{- define "kmirror.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kmirror.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The operator's image: repository@digest, or repository:tag (tag defaults to appVersion).
*/}}
{{- define "kmirror.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "kmirror.fetcherImage" -}}
{{- default (include "kmirror.image" .) .Values.fetcherImage }}
{{- end }}

{{/*
"true" when the operator runs leader election: asked for, or more than one replica.
*/}}
{{- define "kmirror.leaderElection" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.replicaCount) 1) }}true{{ end }}
{{- end }}

{{- define "kmirror.leaseName" -}}
{{- default (include "kmirror.operatorName" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/*
Labels of an alert: (list $ "severity") -> severity and prometheusRule.alertLabels.
*/}}
{{- define "kmirror.alertLabels" -}}
{{- $root := index . 0 -}}
severity: {{ index . 1 }}
{{- with $root.Values.prometheusRule.alertLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
runbook_url of an alert: (list $ "AlertName") -> prometheusRule.runbookUrl#alertname, the anchor
of the alert's heading in the README.
*/}}
{{- define "kmirror.runbook" -}}
{{- $root := index . 0 -}}
{{- printf "%s#%s" $root.Values.prometheusRule.runbookUrl (lower (index . 1)) | quote }}
{{- end }}
