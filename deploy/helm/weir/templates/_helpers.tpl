{{/* The release's name for its objects, at most 63 characters. */}}
{{- define "weir.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "weir.headless" -}}
{{- printf "%s-headless" (include "weir.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "weir.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "weir.labels" -}}
{{ include "weir.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "weir.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "weir.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Secrets the chart makes when the user names none. */}}
{{- define "weir.internalSecretName" -}}
{{- default (printf "%s-internal" (include "weir.fullname" .)) .Values.cluster.internalSecret.existingSecret -}}
{{- end -}}
{{- define "weir.adminTokenSecretName" -}}
{{- default (printf "%s-admin" (include "weir.fullname" .)) .Values.admin.token.existingSecret -}}
{{- end -}}

{{/* Where a broker is reached by clients and peers: its stable DNS name in a StatefulSet,
its pod IP in a Deployment. */}}
{{- define "weir.host" -}}
{{- if eq .Values.wal.kind "file" -}}
$(POD_NAME).{{ include "weir.headless" . }}.$(POD_NAMESPACE).svc
{{- else -}}
$(POD_IP)
{{- end -}}
{{- end -}}

{{- define "weir.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}
