{{/* The release's name, cut to what a Kubernetes name may hold. */}}
{{- define "corral.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "corral.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* corral.selector: the labels that pick one component's pods; call with (dict "root" $ "component" "api"). */}}
{{- define "corral.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "corral.image" -}}
{{- $repo := required "image.repository is required: push an image with go run ./cmd/corral-image --push" .Values.image.repository -}}
{{- if .Values.image.digest -}}
{{ $repo }}@{{ .Values.image.digest }}
{{- else -}}
{{ $repo }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* corral.env: what every process of the release reads: logs as JSON, its data directory, extraEnv. */}}
{{- define "corral.env" -}}
- name: CORRAL_LOG_FORMAT
  value: json
- name: CORRAL_DATA
  value: /var/lib/corral
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* corral.storeEnv: the PostgreSQL URL, from its Secret. */}}
{{- define "corral.storeEnv" -}}
- name: CORRAL_DB
  valueFrom:
    secretKeyRef:
      name: {{ required "database.existingSecret is required: a Secret holding the PostgreSQL URL" .Values.database.existingSecret }}
      key: {{ .Values.database.key }}
{{- end -}}

{{/* corral.vaultEnv: the vault's master key(s), from their Secret. */}}
{{- define "corral.vaultEnv" -}}
- name: CORRAL_VAULT_KEY
  valueFrom:
    secretKeyRef:
      name: {{ required "vault.existingSecret is required: a Secret holding the vault's master key" .Values.vault.existingSecret }}
      key: {{ .Values.vault.key }}
{{- end -}}

{{/* corral.proxyTokenEnv: the token the brains and the MCP proxy share, from its Secret. */}}
{{- define "corral.proxyTokenEnv" -}}
- name: CORRAL_PROXY_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ required "proxy.existingSecret is required with proxy.enabled: a Secret holding the token the brains authenticate to the MCP proxy with" .Values.proxy.existingSecret }}
      key: {{ .Values.proxy.key }}
{{- end -}}

{{/* corral.restricted: the container security context of a process that needs no privilege. */}}
{{- define "corral.restricted" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* corral.sandboxing: the security context of a process that runs sandboxes in its pod (bwrap, oci, gvisor). */}}
{{- define "corral.sandboxing" -}}
{{- if .privileged -}}
privileged: true
runAsUser: 0
readOnlyRootFilesystem: true
{{- else -}}
{{ include "corral.restricted" . }}
{{- end -}}
{{- end -}}

{{- define "corral.metricsAnnotations" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.metrics.port | quote }}
prometheus.io/path: /metrics
{{- end -}}

{{- define "corral.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
