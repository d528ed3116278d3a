{{- define "xo.fullname" -}}
{{- printf "%s-xo" .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{- define "xo.labels" -}}
app.kubernetes.io/name: xo
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
xo.org: {{ .Values.org.prefix }}
{{- end -}}

{{- define "xo.image" -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- end -}}

{{- define "xo.natsUrl" -}}
{{- if .Values.nats.bundled -}}
{{ printf "nats://%s-nats:4222" (include "xo.fullname" .) }}
{{- else -}}
{{ .Values.nats.url }}
{{- end -}}
{{- end -}}

{{/* Environment every XO container gets: NATS, its credentials, the config. */}}
{{- define "xo.env" -}}
- name: XO_NATS_URL
  value: {{ include "xo.natsUrl" .root | quote }}
- name: XO__NATS__USER
  value: {{ .user | quote }}
{{- if .root.Values.nats.credentialsSecret }}
- name: XO__NATS__PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .root.Values.nats.credentialsSecret }}
      key: {{ .user }}
{{- end }}
{{- range .root.Values.models.keys }}
- name: {{ . }}
  valueFrom:
    secretKeyRef:
      name: {{ $.root.Values.models.secret }}
      key: {{ . }}
{{- end }}
{{- end -}}

{{- define "xo.volumes" -}}
- name: config
  configMap:
    name: {{ include "xo.fullname" . }}-config
- name: shared
  persistentVolumeClaim:
    claimName: {{ include "xo.fullname" . }}-shared
{{- end -}}

{{- define "xo.mounts" -}}
- name: config
  mountPath: /etc/xo
- name: shared
  mountPath: /data
{{- end -}}
