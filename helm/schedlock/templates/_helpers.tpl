{{/* Expand the name of the chart. */}}
{{- define "schedlock.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
A default fully qualified app name, at most 63 characters (DNS label). If the release name contains the chart
name, it is used as is.
*/}}
{{- define "schedlock.fullname" -}}
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

{{/* Chart name and version, for the helm.sh/chart label. */}}
{{- define "schedlock.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "schedlock.labels" -}}
helm.sh/chart: {{ include "schedlock.chart" . }}
{{ include "schedlock.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: schedlock
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels: name and instance only, so they never change across upgrades. */}}
{{- define "schedlock.selectorLabels" -}}
app.kubernetes.io/name: {{ include "schedlock.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The service account the server pods use. */}}
{{- define "schedlock.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "schedlock.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image: repository:tag, or repository@digest; an empty tag means the chart's appVersion. */}}
{{- define "schedlock.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* The Secret holding the database URL (and the tokens file): the user's, or the chart's. */}}
{{- define "schedlock.secretName" -}}
{{- default (include "schedlock.fullname" .) .Values.existingSecret }}
{{- end }}

{{/*
The Secret holding the tokens file: auth.existingSecret; else the chart's when it has auth.tokens (or when there is
no existingSecret); else existingSecret. So existingSecret can be a database operator's Secret that has no tokens
(CloudNativePG's <cluster>-app) while the tokens come from auth.tokens or a Secret of their own.
*/}}
{{- define "schedlock.tokensSecretName" -}}
{{- if .Values.auth.existingSecret }}
{{- .Values.auth.existingSecret }}
{{- else if or .Values.auth.tokens (not .Values.existingSecret) }}
{{- include "schedlock.fullname" . }}
{{- else }}
{{- .Values.existingSecret }}
{{- end }}
{{- end }}

{{/* Whether the chart's Secret holds the tokens file ("true" or empty). */}}
{{- define "schedlock.ownTokens" -}}
{{- if and .Values.auth.enabled (not .Values.auth.existingSecret) (or .Values.auth.tokens (not .Values.existingSecret)) }}true{{- end }}
{{- end }}

{{/* Whether the chart creates a Secret of its own: for the database URL, or for the tokens file ("true" or empty). */}}
{{- define "schedlock.ownSecret" -}}
{{- if or (not .Values.existingSecret) (include "schedlock.ownTokens" .) }}true{{- end }}
{{- end }}

{{/* The Secret the migration Job reads the database URL from (see migration-job.yaml). */}}
{{- define "schedlock.migrationSecretName" -}}
{{- if .Values.existingSecret }}
{{- .Values.existingSecret }}
{{- else }}
{{- printf "%s-migrate" (include "schedlock.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* Where the tokens file is mounted, and the path the server reads. */}}
{{- define "schedlock.tokensDir" -}}/etc/schedlock/tokens{{- end }}
{{- define "schedlock.tokensFile" -}}
{{- printf "%s/%s" (include "schedlock.tokensDir" .) .Values.secretKeys.tokens }}
{{- end }}

{{/* Fail early, with a message that says what to set. */}}
{{- define "schedlock.validate" -}}
{{- if not .Values.existingSecret }}
{{- if not .Values.database.url }}
{{- fail "set database.url (postgresql://user:password@host:5432/db), or existingSecret with a Secret that holds it" }}
{{- end }}
{{- if and .Values.auth.enabled (not .Values.auth.tokens) (not .Values.auth.existingSecret) (not .Values.auth.workloadIdentity.enabled) }}
{{- fail "set auth.tokens (the tokens file; see the chart README), or existingSecret or auth.existingSecret, or auth.workloadIdentity.enabled, or auth.enabled=false to run without authentication" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Non-secret server settings. The same list goes into the ConfigMap (serving pods) and, inline, into the
migration Job: a pre-install hook runs before the release's ConfigMap exists.
*/}}
{{- define "schedlock.config" -}}
SCHEDLOCK_HOST: "0.0.0.0"
SCHEDLOCK_PORT: {{ .Values.containerPort | quote }}
SCHEDLOCK_TABLE: {{ .Values.database.table | quote }}
SCHEDLOCK_POOL_MIN_SIZE: {{ .Values.database.pool.minSize | quote }}
SCHEDLOCK_POOL_MAX_SIZE: {{ .Values.database.pool.maxSize | quote }}
SCHEDLOCK_DB_CONNECT_TIMEOUT: {{ .Values.database.connectTimeoutSeconds | quote }}
SCHEDLOCK_DB_STATEMENT_TIMEOUT: {{ .Values.database.statementTimeoutSeconds | quote }}
SCHEDLOCK_DB_POOL_TIMEOUT: {{ .Values.database.poolTimeoutSeconds | quote }}
SCHEDLOCK_MAX_LOCK_DURATION: {{ .Values.config.maxLockDuration | quote }}
SCHEDLOCK_LIST_MAX_LIMIT: {{ .Values.config.listMaxLimit | quote }}
SCHEDLOCK_LOG_LEVEL: {{ .Values.config.logLevel | quote }}
SCHEDLOCK_LOG_FORMAT: {{ .Values.config.logFormat | quote }}
SCHEDLOCK_HISTORY_RETENTION: {{ .Values.config.historyRetention | quote }}
{{- if .Values.auth.enabled }}
SCHEDLOCK_TOKENS_FILE: {{ include "schedlock.tokensFile" . | quote }}
{{- if .Values.auth.workloadIdentity.enabled }}
SCHEDLOCK_TOKENS: {{ include "schedlock.workloadIdentity" . | quote }}
{{- end }}
{{- else }}
SCHEDLOCK_ALLOW_UNAUTHENTICATED: "true"
{{- end }}
{{- end }}

{{/* Pod-level hardening shared by the server and the migration Job. */}}
{{- define "schedlock.podSecurity" -}}
automountServiceAccountToken: {{ .Values.serviceAccount.automountToken }}
enableServiceLinks: false
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Where the server's own service-account token and the cluster's CA are projected (workload identity's fetches). */}}
{{- define "schedlock.kubeApiDir" -}}/var/run/secrets/schedlock/kubernetes{{- end }}

{{/* The cluster's issuer and the bindings, as the inline configuration (SCHEDLOCK_TOKENS; docs/auth.md). */}}
{{- define "schedlock.workloadIdentity" -}}
{{- $wi := .Values.auth.workloadIdentity }}
{{- $dir := include "schedlock.kubeApiDir" . }}
{{- $issuer := dict "name" "cluster" "issuer" $wi.issuer "audiences" (list $wi.audience) "jwks_url" $wi.jwksUrl "ca_file" (printf "%s/ca.crt" $dir) "fetch_token_file" (printf "%s/token" $dir) }}
{{- $bindings := list }}
{{- range $wi.bindings }}
{{- $bindings = append $bindings (merge (dict "issuer" "cluster") (deepCopy .)) }}
{{- end }}
{{- dict "issuers" (list $issuer) "bindings" $bindings | toJson }}
{{- end }}
