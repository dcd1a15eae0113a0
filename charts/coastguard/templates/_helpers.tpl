{{/*
Names. The default name of every object is "coastguard", not
"<release>-coastguard": the daemon's default seeds, the Lighthouse name
coastguard.<namespace>.svc.clusterset.local and the docs use it, and the
kustomize install (deploy/) renders the same names. nameOverride changes the
app.kubernetes.io/name label and the object names; fullnameOverride only the
object names (for example a second install in another namespace, whose
cluster-scoped ClusterRole would otherwise collide).
*/}}
{{- define "coastguard.name" -}}
{{- default "coastguard" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "coastguard.fullname" -}}
{{- default (include "coastguard.name" .) .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object: the kustomize base's, plus Helm's own. */}}
{{- define "coastguard.labels" -}}
app.kubernetes.io/name: {{ include "coastguard.name" . }}
app.kubernetes.io/part-of: coastguard
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "coastguard.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/*
COASTGUARD_SEEDS, or empty to leave the daemon's default. With the
ServiceExport on and the default name, the daemon's default seed (the
Lighthouse name coastguard.<namespace>.svc.clusterset.local, every cluster's
daemons, this one's included) is right, so the ConfigMap does not override
it. Without the export, the cluster-local name of the headless Service (in
clusterDomain); with a renamed Service, its cluster-set name.
*/}}
{{- define "coastguard.seeds" -}}
{{- $svc := include "coastguard.fullname" . -}}
{{- if .Values.seeds -}}
{{- join "," .Values.seeds -}}
{{- else if not .Values.submariner.serviceExport -}}
{{- printf "%s.%s.svc.%s" $svc .Release.Namespace .Values.clusterDomain -}}
{{- else if ne $svc "coastguard" -}}
{{- printf "%s.%s.svc.clusterset.local" $svc .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* The Pod Security level the namespace needs (NOTES.txt, docs). */}}
{{- define "coastguard.podSecurity" -}}
{{- if .Values.persistence.hostPath.enabled -}}privileged{{- else -}}restricted{{- end -}}
{{- end -}}

{{/* The Secret holding the scraper's bearer token (metrics auth). */}}
{{- define "coastguard.metricsTokenSecret" -}}
{{- default (printf "%s-metrics-reader-token" (include "coastguard.fullname" .)) .Values.monitoring.authorization.existingSecret -}}
{{- end -}}
