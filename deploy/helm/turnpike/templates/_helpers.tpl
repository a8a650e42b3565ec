{{/* Names and labels. */}}
{{- define "turnpike.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "turnpike.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "turnpike.selectorLabels" -}}
app.kubernetes.io/name: {{ include "turnpike.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "turnpike.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "turnpike.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "turnpike.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "turnpike.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "turnpike.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* "true" when the state is shared in PostgreSQL (a database URL secret is named), else SQLite in /data. */}}
{{- define "turnpike.postgres" -}}
{{- if .Values.secrets.databaseUrl.name -}}true{{- end -}}
{{- end -}}

{{/* "true" when more than one pod may serve at once. */}}
{{- define "turnpike.multiNode" -}}
{{- if or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1) -}}true{{- end -}}
{{- end -}}

{{/* The secret settings: each `secrets` key and the variable it sets. The one list of them. */}}
{{- define "turnpike.secretVariables" -}}
databaseUrl: TURNPIKE_DATABASE_URL
redisUrl: TURNPIKE_REDIS_URL
stripeSecretKey: STRIPE_SECRET_KEY
stripeWebhookSecret: STRIPE_WEBHOOK_SECRET
hfToken: HF_TOKEN
metricsToken: TURNPIKE_METRICS_TOKEN
{{- end -}}

{{/* The config file keys of those settings (refused in `config`). */}}
{{- define "turnpike.secretConfigKeys" -}}
[database_url, redis_url, stripe_secret_key, stripe_webhook_secret, hf_token, metrics_token]
{{- end -}}

{{/* Stops rendering on values that would deploy something broken; included by the Deployment. */}}
{{- define "turnpike.validate" -}}
{{- if include "turnpike.multiNode" . -}}
{{- if not .Values.secrets.databaseUrl.name -}}
{{- fail "replicaCount > 1 or autoscaling.enabled needs PostgreSQL shared by every pod: create a Secret holding the postgres:// URL and set secrets.databaseUrl.name (and .key); SQLite serves one pod only" -}}
{{- end -}}
{{- if not .Values.secrets.redisUrl.name -}}
{{- fail "replicaCount > 1 or autoscaling.enabled needs Redis shared by every pod (rate limits, sign-in throttling): create a Secret holding the redis:// URL and set secrets.redisUrl.name (and .key)" -}}
{{- end -}}
{{- if and .Values.persistence.enabled (not (has "ReadWriteMany" .Values.persistence.accessModes)) -}}
{{- fail "replicaCount > 1 or autoscaling.enabled cannot share a ReadWriteOnce volume at /data: set persistence.enabled=false (each pod gets an emptyDir; serve GGUF files from modelVolume) or persistence.accessModes=[ReadWriteMany]" -}}
{{- end -}}
{{- end -}}
{{- $secretVariables := fromYaml (include "turnpike.secretVariables" .) -}}
{{- range $name, $value := .Values.env -}}
{{- range $key, $variable := $secretVariables -}}
{{- if eq $name $variable -}}
{{- fail (printf "env.%s is a secret: name an existing Secret in secrets.%s instead (its value never goes in the chart's values)" $name $key) -}}
{{- end -}}
{{- end -}}
{{- if not (regexMatch "^[A-Za-z_][A-Za-z0-9_]*$" $name) -}}
{{- fail (printf "env: %q is not a variable name" $name) -}}
{{- end -}}
{{- end -}}
{{- range $key := fromYamlArray (include "turnpike.secretConfigKeys" .) -}}
{{- if hasKey $.Values.config $key -}}
{{- fail (printf "config.%s is a secret: it would be stored in a ConfigMap; name an existing Secret under secrets instead" $key) -}}
{{- end -}}
{{- end -}}
{{- if le (int .Values.migrations.activeDeadlineSeconds) (int .Values.migrations.waitSeconds) -}}
{{- fail "migrations.activeDeadlineSeconds must be more than migrations.waitSeconds" -}}
{{- end -}}
{{- end -}}

{{/* terminationGracePeriodSeconds: preStop sleep + drain delay + shutdown timeout + margin, rounded up (values.yaml, drain). */}}
{{- define "turnpike.terminationGracePeriodSeconds" -}}
{{- with .Values.drain -}}
{{- ceil (addf .preStopSleepSeconds .drainDelaySeconds .shutdownTimeoutSeconds .marginSeconds) | int -}}
{{- end -}}
{{- end -}}

{{/* The Host names the server answers to besides its public URL's and IP addresses: the Service's in-cluster names, the ingress hosts, allowedHosts. */}}
{{- define "turnpike.allowedHosts" -}}
{{- $fullname := include "turnpike.fullname" . -}}
{{- $hosts := list $fullname (printf "%s.%s" $fullname .Release.Namespace) (printf "%s.%s.svc" $fullname .Release.Namespace) (printf "%s.%s.svc.cluster.local" $fullname .Release.Namespace) -}}
{{- if .Values.ingress.enabled -}}
{{- range .Values.ingress.hosts -}}
{{- if .host -}}{{- $hosts = append $hosts .host -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- range splitList "," .Values.allowedHosts -}}
{{- if trim . -}}{{- $hosts = append $hosts (trim .) -}}{{- end -}}
{{- end -}}
{{- $hosts | uniq | join "," -}}
{{- end -}}

{{/* A setting's value as text: whole numbers as integers (Helm reads numbers as float64, which print as 1.048576e+07). */}}
{{- define "turnpike.text" -}}
{{- if and (kindIs "float64" .) (eq . (floor .)) -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/* An env entry from a Secret: (list "VARIABLE" $reference) where $reference is {name, key}. */}}
{{- define "turnpike.secretEnv" -}}
{{- $variable := index . 0 -}}
{{- $reference := index . 1 -}}
- name: {{ $variable }}
  valueFrom:
    secretKeyRef:
      name: {{ $reference.name | quote }}
      key: {{ required (printf "the Secret %s for %s needs a key" $reference.name $variable) $reference.key | quote }}
{{- end -}}

{{/* The pod security context and the container one, shared by the serving pods and the migration Job. */}}
{{- define "turnpike.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext -}}
{{- end -}}

{{- define "turnpike.containerSecurityContext" -}}
{{- toYaml .Values.securityContext -}}
{{- end -}}
