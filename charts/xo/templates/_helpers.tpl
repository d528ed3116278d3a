{{- define "xo.fullname" -}}
{{- printf "%s-xo" .Release.Name | trunc 24 | trimSuffix "-" -}}
{{- end -}}

{{- define "xo.selector" -}}
app.kubernetes.io/name: xo
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "xo.labels" -}}
{{ include "xo.selector" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: xo
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
xo.org: {{ .Values.org.prefix }}
{{- end -}}

{{- define "xo.image" -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- end -}}

{{- define "xo.serviceAccount" -}}
{{- if .Values.serviceAccount.create -}}
{{ include "xo.fullname" . }}
{{- else -}}
{{ .Values.serviceAccount.name | default "default" }}
{{- end -}}
{{- end -}}

{{- define "xo.credentialsSecret" -}}
{{- if .Values.nats.credentialsSecret -}}
{{ .Values.nats.credentialsSecret }}
{{- else -}}
{{ include "xo.fullname" . }}-nats-credentials
{{- end -}}
{{- end -}}

{{/* Whether XO's connections carry passwords. */}}
{{- define "xo.auth" -}}
{{- if or .Values.nats.bundled .Values.nats.credentialsSecret -}}true{{- end -}}
{{- end -}}

{{- define "xo.natsUrl" -}}
{{- if .Values.nats.bundled -}}
{{ printf "%s://%s-nats:4222" (ternary "tls" "nats" (ne .Values.nats.tlsSecret "")) (include "xo.fullname" .) }}
{{- else -}}
{{ .Values.nats.url }}
{{- end -}}
{{- end -}}

{{/* The runner units (pod names), comma-separated. */}}
{{- define "xo.runnerUnits" -}}
{{- $units := list -}}
{{- range $r := .Values.runners -}}
{{- range $i := until (int $r.replicas) -}}
{{- $units = append $units (printf "%s-runner-%s-%d-0" (include "xo.fullname" $) $r.role $i) -}}
{{- end -}}
{{- end -}}
{{- join "," $units -}}
{{- end -}}

{{/* Every NATS user, comma-separated: the services, then the runners. */}}
{{- define "xo.natsUsers" -}}
{{- $runners := include "xo.runnerUnits" . -}}
supervisor,queue,knowledge,operator,console{{ if $runners }},{{ $runners }}{{ end }}
{{- end -}}

{{/* The environment variable of a user's password in the NATS pod. */}}
{{- define "xo.passwordVar" -}}
XO_NATS_PASSWORD_{{ . | upper | replace "-" "_" }}
{{- end -}}

{{/* Pod-level hardening: non-root, the runtime's seccomp profile, no API token. */}}
{{- define "xo.podSecurity" -}}
serviceAccountName: {{ include "xo.serviceAccount" . }}
automountServiceAccountToken: false
securityContext:
  runAsNonRoot: true
  runAsUser: {{ .Values.securityContext.runAsUser }}
  runAsGroup: {{ .Values.securityContext.runAsGroup }}
  fsGroup: {{ .Values.securityContext.fsGroup }}
  seccompProfile:
    type: RuntimeDefault
{{- end -}}

{{/* Container-level hardening. */}}
{{- define "xo.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: [ALL]
{{- end -}}

{{/* Rolls the pods when the configuration changes. */}}
{{- define "xo.checksums" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- end -}}

{{/* Environment every XO container gets: NATS, its credentials, TLS. `user`
     may be "$(XO_UNIT)" (expanded by Kubernetes from the env var before it). */}}
{{- define "xo.env" -}}
- name: XO_NATS_URL
  value: {{ include "xo.natsUrl" .root | quote }}
- name: HOME
  value: /tmp
{{- if include "xo.auth" .root }}
- name: XO__NATS__USER
  value: {{ .user | quote }}
- name: XO__NATS__PASSWORD_FILE
  value: {{ printf "/etc/xo-nats/%s" .user | quote }}
{{- end }}
{{- if .root.Values.nats.tlsSecret }}
- name: XO__NATS__TLS_CA_FILE
  value: /etc/xo-tls/ca.crt
- name: XO__NATS__TLS_CERT_FILE
  value: /etc/xo-tls/tls.crt
- name: XO__NATS__TLS_KEY_FILE
  value: /etc/xo-tls/tls.key
{{- end }}
{{- range .root.Values.models.keys }}
- name: {{ . }}
  valueFrom:
    secretKeyRef:
      name: {{ $.root.Values.models.secret }}
      key: {{ . }}
{{- end }}
{{- end -}}

{{/* Volumes: the config, the shared volume, /tmp, this pod's own password
     (`key`: its user, a fixed name), TLS. */}}
{{- define "xo.volumes" -}}
- name: config
  configMap:
    name: {{ include "xo.fullname" .root }}-config
- name: shared
  persistentVolumeClaim:
    claimName: {{ include "xo.fullname" .root }}-shared
- name: tmp
  emptyDir: {}
{{- if include "xo.auth" .root }}
- name: nats-credentials
  secret:
    secretName: {{ include "xo.credentialsSecret" .root }}
    defaultMode: 0400
    items:
      - key: {{ .user }}
        path: {{ .user }}
{{- end }}
{{- if .root.Values.nats.tlsSecret }}
- name: nats-tls
  secret:
    secretName: {{ .root.Values.nats.tlsSecret }}
    defaultMode: 0400
{{- end }}
{{- end -}}

{{- define "xo.mounts" -}}
- name: config
  mountPath: /etc/xo
  readOnly: true
- name: shared
  mountPath: /data
- name: tmp
  mountPath: /tmp
{{- if include "xo.auth" . }}
- name: nats-credentials
  mountPath: /etc/xo-nats
  readOnly: true
{{- end }}
{{- if .Values.nats.tlsSecret }}
- name: nats-tls
  mountPath: /etc/xo-tls
  readOnly: true
{{- end }}
{{- end -}}

{{/* A readiness (and liveness) probe that asks the service over the bus. */}}
{{- define "xo.execProbe" -}}
exec:
  command: ["xo", "--config", "/etc/xo/xo.toml", {{ range $i, $a := . }}{{ if $i }}, {{ end }}{{ $a | quote }}{{ end }}]
timeoutSeconds: 10
periodSeconds: 15
failureThreshold: 4
{{- end -}}
