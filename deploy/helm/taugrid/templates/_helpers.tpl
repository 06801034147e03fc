{{/*
Names and labels shared by every template.
*/}}

{{- define "taugrid.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's base name. A release named "taugrid" (or containing it) keeps its name, so
`helm install taugrid ... -n taugrid-system` gives the Service taugrid.taugrid-system.svc,
the server's default in-cluster URL. Cluster-scoped objects (ClusterRoles) carry it too:
install one TauGrid per cluster.
*/}}
{{- define "taugrid.fullname" -}}
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

{{- define "taugrid.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "taugrid.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: taugrid
{{- end }}

{{/* Selector labels of one component: include "taugrid.selector" (list . "server") */}}
{{- define "taugrid.selector" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "taugrid.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* The image every TauGrid container runs, and the one the server puts in pods. */}}
{{- define "taugrid.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}:{{ $tag }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end }}

{{- define "taugrid.serverServiceAccount" -}}
{{ include "taugrid.fullname" . }}
{{- end }}

{{- define "taugrid.agentServiceAccount" -}}
{{ include "taugrid.fullname" . }}-health-agent
{{- end }}

{{- define "taugrid.workspaceRole" -}}
{{ include "taugrid.fullname" . }}-workspace
{{- end }}

{{/* The URL pods and agents reach the server at (TAU_POD_SERVER_URL). */}}
{{- define "taugrid.serverURL" -}}
http://{{ include "taugrid.fullname" . }}.{{ .Release.Namespace }}.svc:{{ .Values.service.port }}
{{- end }}

{{- define "taugrid.postgresql" -}}
{{ include "taugrid.fullname" . }}-postgresql
{{- end }}

{{/* The Secret and key holding TAU_DATABASE_URL. */}}
{{- define "taugrid.databaseSecret" -}}
{{- if and (not .Values.postgresql.enabled) .Values.database.existingSecret -}}
{{ .Values.database.existingSecret }}
{{- else -}}
{{ include "taugrid.fullname" . }}-database
{{- end -}}
{{- end }}

{{- define "taugrid.databaseSecretKey" -}}
{{- if and (not .Values.postgresql.enabled) .Values.database.existingSecret -}}
{{ .Values.database.existingSecretKey }}
{{- else -}}
url
{{- end -}}
{{- end }}

{{- define "taugrid.agentTokenSecret" -}}
{{ default (printf "%s-health-agent-token" (include "taugrid.fullname" .)) .Values.health.agentTokenSecret }}
{{- end }}

{{/* The policy document of the values: policy without the chart's own key. */}}
{{- define "taugrid.policyDocument" -}}
{{- $doc := dict -}}
{{- range $key, $value := omit .Values.policy "existingConfigMap" -}}
{{- if $value -}}{{- $_ := set $doc $key $value -}}{{- end -}}
{{- end -}}
{{- toYaml $doc -}}
{{- end }}

{{/* Whether the server gets a policy file: one in the values, or a ConfigMap named. */}}
{{- define "taugrid.hasPolicy" -}}
{{- if or .Values.policy.existingConfigMap .Values.policy.flavors -}}true{{- end -}}
{{- end }}

{{- define "taugrid.policyConfigMap" -}}
{{ default (printf "%s-policy" (include "taugrid.fullname" .)) .Values.policy.existingConfigMap }}
{{- end }}

{{/*
Restricted pod security (Pod Security Standards "restricted"), for every container but
the GPU health agent's: no root, no privilege escalation, no capabilities, the runtime's
seccomp profile, a read-only root filesystem.
*/}}
{{- define "taugrid.restrictedContainer" -}}
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
readOnlyRootFilesystem: true
runAsNonRoot: true
seccompProfile:
  type: RuntimeDefault
{{- end }}
