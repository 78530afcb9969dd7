{{/*
Names, labels and the pieces every component shares.
*/}}

{{/* The base name of every object: <release>-blobstore, or the release name when it already says blobstore. */}}
{{- define "blobstore.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Name of one component's objects: (dict "root" $ "component" "bookie"). */}}
{{- define "blobstore.componentName" -}}
{{- printf "%s-%s" (include "blobstore.fullname" .root) .component -}}
{{- end -}}

{{- define "blobstore.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "blobstore.labels" -}}
{{ include "blobstore.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "blobstore.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* A value as an environment variable's text: integers without an exponent (values
arrive as floats), booleans as true/false. */}}
{{- define "blobstore.scalar" -}}
{{- if and (kindIs "float64" .) (eq (floor .) .) -}}
{{- int64 . -}}
{{- else -}}
{{- . -}}
{{- end -}}
{{- end -}}

{{/* One EnvVar per key of a settings map: (dict "prefix" "BLOBSTORE_BOOKIE_" "settings" $map). */}}
{{- define "blobstore.settingsEnv" -}}
{{- range $key, $value := .settings }}
- name: {{ printf "%s%s" $.prefix (upper $key) }}
  value: {{ include "blobstore.scalar" $value | quote }}
{{- end }}
{{- end -}}

{{/* The same, indented for a container's env list, or nothing for no settings:
(dict "prefix" ... "settings" ... "indent" 12). */}}
{{- define "blobstore.settingsEnvIndented" -}}
{{- with (include "blobstore.settingsEnv" .) | trim }}
{{ . | indent $.indent }}
{{- end }}
{{- end -}}

{{/* The ZooKeeper connect string of the cluster, chroot included. */}}
{{- define "blobstore.zkConnect" -}}
{{- $servers := list -}}
{{- if .Values.zookeeper.enabled -}}
{{- $name := include "blobstore.componentName" (dict "root" . "component" "zookeeper") -}}
{{- range $ordinal := until (int .Values.zookeeper.replicas) -}}
{{- $servers = append $servers (printf "%s-%d.%s-headless.%s.svc.%s:%d" $name $ordinal $name $.Release.Namespace $.Values.clusterDomain (int $.Values.zookeeper.ports.client)) -}}
{{- end -}}
{{- else -}}
{{- $servers = .Values.zookeeper.external.servers -}}
{{- end -}}
{{- printf "%s%s" (join "," $servers) .Values.zookeeper.chroot -}}
{{- end -}}

{{/* Environment of every blobstore process. */}}
{{- define "blobstore.commonEnv" -}}
- name: BLOBSTORE_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: BLOBSTORE_ZK_REQUEST_BYTES_MAX
  value: {{ include "blobstore.scalar" .Values.zookeeper.requestBytesMax | quote }}
{{- end -}}

{{/* The init container that waits for ZooKeeper and creates the chroot. */}}
{{- define "blobstore.zkChrootInit" -}}
- name: zk-chroot
  image: {{ include "blobstore.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["python", "/opt/blobstore/scripts/zk_chroot.py"]
  args: ["--zk", {{ include "blobstore.zkConnect" . | quote }}]
  securityContext: {{- toYaml .Values.securityContext | nindent 4 }}
  resources:
    requests:
      cpu: 50m
      memory: 64Mi
    limits:
      memory: 128Mi
  {{- with include "blobstore.credentialsEnv" (dict "root" . "ledger" false "indent" 4) }}
  env: {{- . }}
  {{- end }}
  volumeMounts:
    - name: scripts
      mountPath: /opt/blobstore/scripts
    {{- include "blobstore.credentialsMounts" (dict "root" . "ledger" false "indent" 4) }}
{{- end -}}

{{/* Volumes every blobstore pod mounts: the chart's scripts and a writable /tmp. */}}
{{- define "blobstore.commonVolumes" -}}
- name: scripts
  configMap:
    name: {{ include "blobstore.componentName" (dict "root" . "component" "scripts") }}
    defaultMode: 0555
- name: tmp
  emptyDir: {}
{{- end -}}

{{/* Pod-level settings every pod shares. */}}
{{- define "blobstore.podCommon" -}}
enableServiceLinks: false
securityContext: {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Anti-affinity across hosts: (dict "root" $ "component" "bookie" "mode" "hard"). */}}
{{- define "blobstore.hostAntiAffinity" -}}
{{- if eq .mode "hard" }}
podAntiAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels: {{- include "blobstore.selectorLabels" . | nindent 10 }}
{{- else if eq .mode "soft" }}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels: {{- include "blobstore.selectorLabels" . | nindent 12 }}
{{- end }}
{{- end -}}

{{/* The URL scheme of the gateways. */}}
{{- define "blobstore.gatewayScheme" -}}
{{- if .Values.gateway.tls.enabled -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/* The Secret holding the S3 users file. */}}
{{- define "blobstore.usersSecret" -}}
{{- .Values.gateway.users.existingSecret | default (include "blobstore.componentName" (dict "root" . "component" "users")) -}}
{{- end -}}

{{/* The Secret holding the cluster key. */}}
{{- define "blobstore.clusterKeySecret" -}}
{{- .Values.clusterKey.existingSecret | default (include "blobstore.componentName" (dict "root" . "component" "cluster-key")) -}}
{{- end -}}

{{/* Where the pods that open users' secrets or object ledgers find the cluster key. */}}
{{- define "blobstore.clusterKeyDir" -}}
/etc/blobstore/cluster-key
{{- end -}}

{{/* The cluster key for a container: its variable (the file's path, never the key)... */}}
{{- define "blobstore.clusterKeyEnv" -}}
- name: BLOBSTORE_CLUSTER_KEY_FILE
  value: {{ printf "%s/%s" (include "blobstore.clusterKeyDir" .) .Values.clusterKey.fileKey | quote }}
{{- end -}}

{{/* ...its read-only mount... */}}
{{- define "blobstore.clusterKeyMount" -}}
- name: cluster-key
  mountPath: {{ include "blobstore.clusterKeyDir" . }}
  readOnly: true
{{- end -}}

{{/* ...and the pod's volume: the one key of the Secret, mode 0400 (the kubelet adds
group read for fsGroup, the pods' group). */}}
{{- define "blobstore.clusterKeyVolume" -}}
- name: cluster-key
  secret:
    secretName: {{ include "blobstore.clusterKeySecret" . }}
    defaultMode: 0400
    items:
      - key: {{ .Values.clusterKey.fileKey }}
        path: {{ .Values.clusterKey.fileKey }}
{{- end -}}

{{/* The Secret holding the ZooKeeper digest credential (zookeeper.auth). */}}
{{- define "blobstore.zkAuthSecret" -}}
{{- .Values.zookeeper.auth.existingSecret | default (include "blobstore.componentName" (dict "root" . "component" "zk-auth")) -}}
{{- end -}}

{{/* The Secret holding the ledger CA, certificate and key (ledgerTls). */}}
{{- define "blobstore.ledgerTlsSecret" -}}
{{- .Values.ledgerTls.existingSecret | default (include "blobstore.componentName" (dict "root" . "component" "ledger-tls")) -}}
{{- end -}}

{{/* The files of a kubernetes.io/tls Secret with its CA that BLOBSTORE_LEDGER_TLS_DIR
holds (blobstore.runtime.ledger_tls). */}}
{{- define "blobstore.ledgerTlsFiles" -}}
{{- list "ca.crt" "tls.crt" "tls.key" | toJson -}}
{{- end -}}

{{/* `text` indented by `indent` on a new line, or nothing for blank text. */}}
{{- define "blobstore.indented" -}}
{{- with .text | trim }}
{{ . | indent $.indent }}
{{- end }}
{{- end -}}

{{/* The variables naming the cluster's credentials that are turned on: the ZooKeeper
digest file (every process that opens a session) and, with `ledger`, the ledger TLS
directory (bookies and ledger clients): (dict "root" $ "ledger" true "indent" 12). */}}
{{- define "blobstore.credentialsEnv" -}}
{{- include "blobstore.indented" (dict "text" (include "blobstore.credentialsEnvText" .) "indent" .indent) -}}
{{- end -}}

{{- define "blobstore.credentialsEnvText" -}}
{{- $v := .root.Values }}
{{- if $v.zookeeper.auth.enabled }}
- name: BLOBSTORE_ZK_DIGEST_FILE
  value: {{ printf "%s/%s" (include "blobstore.zkAuthDir" .root) $v.zookeeper.auth.fileKey | quote }}
{{- end }}
{{- if and .ledger $v.ledgerTls.enabled }}
- name: BLOBSTORE_LEDGER_TLS_DIR
  value: {{ include "blobstore.ledgerTlsDir" .root | quote }}
{{- end }}
{{- end -}}

{{/* Their read-only mounts, same arguments. */}}
{{- define "blobstore.credentialsMounts" -}}
{{- include "blobstore.indented" (dict "text" (include "blobstore.credentialsMountsText" .) "indent" .indent) -}}
{{- end -}}

{{- define "blobstore.credentialsMountsText" -}}
{{- $v := .root.Values }}
{{- if $v.zookeeper.auth.enabled }}
- name: zk-auth
  mountPath: {{ include "blobstore.zkAuthDir" .root }}
  readOnly: true
{{- end }}
{{- if and .ledger $v.ledgerTls.enabled }}
- name: ledger-tls
  mountPath: {{ include "blobstore.ledgerTlsDir" .root }}
  readOnly: true
{{- end }}
{{- end -}}

{{/* Their volumes: the Secrets' files alone, mode 0400 (the kubelet adds group read for
fsGroup, the pods' group): (dict "root" $ "ledger" true "indent" 8). */}}
{{- define "blobstore.credentialsVolumes" -}}
{{- include "blobstore.indented" (dict "text" (include "blobstore.credentialsVolumesText" .) "indent" .indent) -}}
{{- end -}}

{{- define "blobstore.credentialsVolumesText" -}}
{{- $v := .root.Values }}
{{- if $v.zookeeper.auth.enabled }}
- name: zk-auth
  secret:
    secretName: {{ include "blobstore.zkAuthSecret" .root }}
    defaultMode: 0400
    items:
      - key: {{ $v.zookeeper.auth.fileKey }}
        path: {{ $v.zookeeper.auth.fileKey }}
{{- end }}
{{- if and .ledger $v.ledgerTls.enabled }}
- name: ledger-tls
  secret:
    secretName: {{ include "blobstore.ledgerTlsSecret" .root }}
    defaultMode: 0400
    items:
    {{- range include "blobstore.ledgerTlsFiles" .root | fromJsonArray }}
      - key: {{ . }}
        path: {{ . }}
    {{- end }}
{{- end }}
{{- end -}}

{{/* Where the pods find the ZooKeeper credential and the ledger TLS files. */}}
{{- define "blobstore.zkAuthDir" -}}
/etc/blobstore/zk-auth
{{- end -}}

{{- define "blobstore.ledgerTlsDir" -}}
/etc/blobstore/ledger-tls
{{- end -}}

{{/* Checks across values that a JSON schema cannot express: one clear line each. */}}
{{- define "blobstore.checks" -}}
{{- if and (not .Values.zookeeper.enabled) (not .Values.zookeeper.external.servers) -}}
{{- fail "zookeeper.external.servers: name the servers of the existing ensemble (host:port each) when zookeeper.enabled is false" -}}
{{- end -}}
{{- $ensemble := int (.Values.objects.ensemble_size | default 3) -}}
{{- if lt (int .Values.bookies.replicas) $ensemble -}}
{{- fail (printf "bookies.replicas=%d: fewer bookies than an ensemble (objects.ensemble_size=%d); no ledger could be created" (int .Values.bookies.replicas) $ensemble) -}}
{{- end -}}
{{- if and .Values.gateway.tls.enabled (not .Values.gateway.tls.secretName) -}}
{{- fail "gateway.tls.secretName: name a Secret of type kubernetes.io/tls when gateway.tls.enabled is true" -}}
{{- end -}}
{{- if and .Values.autorecovery.enabled (kindIs "invalid" .Values.autorecovery.auditIntervalS) (hasKey .Values.objects "audit_interval_s") (not .Values.objects.audit_interval_s) -}}
{{- fail "objects.audit_interval_s=0 would stop autorecovery too (it audits at that interval): set autorecovery.auditIntervalS, or gateway.auditIntervalS to turn the gateways' auditor off" -}}
{{- end -}}
{{- if and .Values.gateway.autoscaling.enabled (gt (int .Values.gateway.autoscaling.minReplicas) (int .Values.gateway.autoscaling.maxReplicas)) -}}
{{- fail (printf "gateway.autoscaling.minReplicas=%d is above maxReplicas=%d" (int .Values.gateway.autoscaling.minReplicas) (int .Values.gateway.autoscaling.maxReplicas)) -}}
{{- end -}}
{{- end -}}
