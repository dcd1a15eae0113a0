{{/* Labels on every object: the kustomize base's, plus Helm's own. */}}
{{- define "coastguard.labels" -}}
app.kubernetes.io/name: coastguard
app.kubernetes.io/part-of: coastguard
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "coastguard.seeds" -}}
{{- if .Values.seeds -}}
{{- join "," .Values.seeds -}}
{{- else -}}
{{- $local := printf "coastguard.%s.svc.cluster.local" .Release.Namespace -}}
{{- if .Values.submariner.serviceExport -}}
{{- printf "%s,coastguard.%s.svc.clusterset.local" $local .Release.Namespace -}}
{{- else -}}
{{- $local -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "coastguard.podSecurity" -}}
{{- if .Values.persistence.hostPath.enabled -}}privileged{{- else -}}{{ .Values.podSecurity.enforce }}{{- end -}}
{{- end -}}
