{{/* The release's name for its objects, at most 63 characters. */}}
{{- define "sluice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The Elasticsearch sink's pods: a name of their own, so no selector of the publisher's matches them. */}}
{{- define "sluice.esSinkSelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-es-sink
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.esSinkLabels" -}}
{{ include "sluice.esSinkSelectorLabels" . }}
app.kubernetes.io/component: elasticsearch-sink
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The archiver's pods: a name of their own, so no selector of the publisher's matches them. */}}
{{- define "sluice.archiveSelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-archive
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.archiveLabels" -}}
{{ include "sluice.archiveSelectorLabels" . }}
app.kubernetes.io/component: archive
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The verify CronJob's pods: a name of their own, so no selector of the publisher's matches them. */}}
{{- define "sluice.verifyLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-verify
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: verify
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
