{{/*
Names, labels and the pieces every role's pod shares: the image, TLS flags and
volumes, probes on the gRPC health service, scrape annotations.
*/}}

{{- define "tributary.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-wide prefix of every object name; kept short so "-coordinator-state" fits. */}}
{{- define "tributary.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "tributary.coordinatorName" -}}{{ include "tributary.fullname" . }}-coordinator{{- end -}}
{{- define "tributary.psName" -}}{{ include "tributary.fullname" . }}-ps{{- end -}}
{{- define "tributary.workerName" -}}{{ include "tributary.fullname" . }}-worker{{- end -}}

{{/* host:port of the coordinator's gRPC service, as workers and shards dial it. */}}
{{- define "tributary.coordinatorAddress" -}}
{{ include "tributary.coordinatorName" . }}:{{ .Values.coordinator.grpcPort }}
{{- end -}}

{{- define "tributary.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tributary.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Call with (dict "root" $ "component" "coordinator"). */}}
{{- define "tributary.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{ include "tributary.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: tributary
{{- end -}}

{{/*
A component's image: each field of its own image (coordinator.image, ps.image,
worker.image, job.image) where set, else the shared image's; the tag last falls back
to the chart's appVersion. Call with (dict "root" $ "image" .Values.worker.image).
*/}}
{{- define "tributary.image" -}}
{{- $own := .image | default dict -}}
{{- $shared := .root.Values.image -}}
{{ $own.repository | default $shared.repository }}:{{ $own.tag | default $shared.tag | default .root.Chart.AppVersion }}
{{- end -}}
{{- define "tributary.imagePullPolicy" -}}
{{- (.image | default dict).pullPolicy | default .root.Values.image.pullPolicy -}}
{{- end -}}

{{/* Pod-template metadata. Call with (dict "root" $ "component" "ps" "httpPort" 8081). */}}
{{- define "tributary.podMetadata" -}}
labels:
  {{- include "tributary.selectorLabels" . | nindent 2 }}
  {{- with .root.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- if or .root.Values.metrics.scrapeAnnotations .root.Values.podAnnotations }}
annotations:
  {{- if .root.Values.metrics.scrapeAnnotations }}
  prometheus.io/scrape: "true"
  prometheus.io/port: {{ .httpPort | quote }}
  prometheus.io/path: /metrics
  {{- end }}
  {{- with .root.Values.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* Flags every binary shares (common/server_flags.cc). Call with (dict "root" $ "role" .Values.ps). */}}
{{- define "tributary.commonArgs" -}}
{{- if and .root.Values.tls.certificateRoles (not .root.Values.tls.enabled) -}}
{{- fail "tls.certificateRoles needs tls.enabled: true (roles come from mutual TLS client certificates)" -}}
{{- end -}}
- --drain_seconds={{ .role.drainSeconds }}
{{- if .root.Values.clusterToken.allowUnauthenticated }}
- --allow_unauthenticated
{{- else }}
- --cluster_token_file=/etc/tributary/cluster-token/token
{{- end }}
{{- if .root.Values.tls.enabled }}
- --tls_cert=/etc/tributary/tls/tls.crt
- --tls_key=/etc/tributary/tls/tls.key
- --tls_ca=/etc/tributary/tls/ca.crt
{{- if .root.Values.tls.certificateRoles }}
- --certificate_roles
{{- end }}
{{- end }}
{{- end -}}

{{/*
The TLS Secret a component mounts: its own under tls.certificateRoles (roleSecretNames,
else secretName). Call with (dict "root" $ "component" "worker").
*/}}
{{- define "tributary.tlsSecretName" -}}
{{- $own := "" -}}
{{- if .root.Values.tls.certificateRoles -}}
{{- $own = index .root.Values.tls.roleSecretNames .component | default "" -}}
{{- end -}}
{{- $own | default (required "tls.secretName is required when tls.enabled is true" .root.Values.tls.secretName) -}}
{{- end -}}

{{/*
Startup, readiness and liveness probes. Without TLS: the native gRPC probe on the
grpc.health.v1 service of the whole server (NOT_SERVING until ready and while
draining). With TLS the kubelet's gRPC probe cannot connect, so HTTP /healthz on the
side port, which follows the same serving state. Call with (dict "root" $ "role" .Values.ps).
*/}}
{{- define "tributary.probes" -}}
{{- $handler := dict "grpc" (dict "port" (int .role.grpcPort)) -}}
{{- if .root.Values.tls.enabled -}}
{{- $handler = dict "httpGet" (dict "path" "/healthz" "port" "http") -}}
{{- end -}}
startupProbe:
  {{- toYaml (merge (deepCopy $handler) .role.startupProbe) | nindent 2 }}
readinessProbe:
  {{- toYaml (merge (deepCopy $handler) .role.readinessProbe) | nindent 2 }}
livenessProbe:
  {{- toYaml (merge (deepCopy $handler) .role.livenessProbe) | nindent 2 }}
{{- end -}}

{{/* Name of the Secret holding the control token; empty when there is none. */}}
{{- define "tributary.controlTokenSecret" -}}
{{- if and .Values.controlToken.existingSecret .Values.controlToken.value -}}
{{- fail "controlToken: set either existingSecret or value, not both" -}}
{{- end -}}
{{- if .Values.controlToken.existingSecret -}}
{{- .Values.controlToken.existingSecret -}}
{{- else if .Values.controlToken.value -}}
{{- include "tributary.fullname" . }}-control-token
{{- end -}}
{{- end -}}

{{/* Fails when a role's gRPC and HTTP ports collide. Call with (dict "name" "ps" "role" .Values.ps). */}}
{{- define "tributary.checkPorts" -}}
{{- if eq (int .role.grpcPort) (int .role.httpPort) -}}
{{- fail (printf "%s.grpcPort and %s.httpPort are both %d: they must differ" .name .name (int .role.grpcPort)) -}}
{{- end -}}
{{- end -}}

{{/*
The JobSpec the hook submits: job.spec, with nodesMax (when unset) raised to the worker
pod count, so every node that hosts a worker pod is admitted (the proto's own default,
nodesMin, would leave the others idle); and, for GPU pods, replicasPerWorker (when
unset) set to worker.gpus: a GPU worker runs one replica per GPU, so the proto's
default of 1 would leave the other GPUs of the pod idle. Every field under its
lowerCamelCase name; checked against the rest of the release (values.schema.json has
checked each field alone).
*/}}
{{- define "tributary.jobSpecJson" -}}
{{- $spec := deepCopy .Values.job.spec -}}
{{- $_ := include "tributary.camelCaseKeys" $spec -}}
{{- if not (hasKey $spec "nodesMax") -}}
{{- $_ := set $spec "nodesMax" (max (int .Values.worker.replicas) (int (default 1 $spec.nodesMin))) -}}
{{- end -}}
{{- if and (gt (int .Values.worker.gpus) 0) (not (hasKey $spec "replicasPerWorker")) -}}
{{- $_ := set $spec "replicasPerWorker" (int .Values.worker.gpus) -}}
{{- end -}}
{{- include "tributary.checkJobSpec" (dict "root" . "spec" $spec) -}}
{{- toJson $spec -}}
{{- end -}}

{{/*
Renames the proto field names of a JobSpec (global_batch_size) to their lowerCamelCase
JSON names (globalBatchSize), in place and in every nested message. The proto name
wins when both are present: values.yaml's defaults use lowerCamelCase, so a proto
name can only be the user's. Call with the spec (a dict); prints nothing.
*/}}
{{- define "tributary.camelCaseKeys" -}}
{{- $message := . -}}
{{- range $key := keys $message | sortAlpha -}}
{{- if contains "_" $key -}}
{{- $_ := set $message (camelcase $key | untitle) (index $message $key) -}}
{{- $_ := unset $message $key -}}
{{- end -}}
{{- end -}}
{{- range $key, $value := $message -}}
{{- if kindIs "map" $value -}}
{{- $_ := include "tributary.camelCaseKeys" $value -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
What the schema cannot check in one field of the JobSpec (lowerCamelCase keys, nodesMax
filled in), against the rest of the release: nodesMax >= nodesMin; its partitions fit
the shards' ps.maxPartitionBytes; its dataset paths lie under the workers' --data_root.
Call with (dict "root" $ "spec" $spec); prints nothing.
*/}}
{{- define "tributary.checkJobSpec" -}}
{{- $spec := .spec -}}
{{- $nodesMin := int (default 1 $spec.nodesMin) -}}
{{- if lt (int $spec.nodesMax) $nodesMin -}}
{{- fail (printf "job.spec.nodesMax (%d) must be >= job.spec.nodesMin (%d)" (int $spec.nodesMax) $nodesMin) -}}
{{- end -}}
{{- $partition := int64 (default 4194304 $spec.partitionBytes) -}}
{{- if gt $partition (int64 .root.Values.ps.maxPartitionBytes) -}}
{{- fail (printf "job.spec.partitionBytes (%d, 4194304 when unset) is larger than ps.maxPartitionBytes (%d): the shards would refuse the job's partitions" $partition (int64 .root.Values.ps.maxPartitionBytes)) -}}
{{- end -}}
{{- $root := include "tributary.dataRoot" .root -}}
{{- if $root -}}
{{- $dataset := $spec.dataset | default dict -}}
{{- $paths := dict -}}
{{- range $field := list "directory" "trainPath" "testPath" "trainLabelsPath" "testLabelsPath" -}}
{{- with index $dataset $field -}}
{{- $_ := set $paths $field . -}}
{{- end -}}
{{- end -}}
{{- /* The coordinator's default for IDX (common/job_spec.h kDefaultIdxDirectory). */ -}}
{{- $defaulted := "" -}}
{{- if and (not $paths.directory) (eq ($dataset.format | default "IDX") "IDX") -}}
{{- $_ := set $paths "directory" "/usr/share/datasets/fashion-mnist" -}}
{{- $defaulted = " (IDX's default when unset)" -}}
{{- end -}}
{{- range $field, $path := $paths -}}
{{- if and (isAbs $path) (not (include "tributary.pathIsUnder" (dict "path" $path "root" $root))) -}}
{{- fail (printf "job.spec.dataset.%s %q%s lies outside the workers' --data_root=%s (worker.dataRoot, else worker.dataVolume.mountPath): the job would fail with PERMISSION_DENIED" $field $path (ternary $defaulted "" (eq $field "directory")) $root) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The workers' --data_root: worker.dataRoot, else the data volume's mount path, else
empty (the flag is not passed: the binary's default /). Fails when the data volume
lies outside an explicit worker.dataRoot.
*/}}
{{- define "tributary.dataRoot" -}}
{{- $w := .Values.worker -}}
{{- $volume := $w.dataVolume -}}
{{- if and $volume.enabled $w.dataRoot (not (include "tributary.pathIsUnder" (dict "path" $volume.mountPath "root" $w.dataRoot))) -}}
{{- fail (printf "worker.dataVolume.mountPath %q lies outside worker.dataRoot %q: the workers could not read it" $volume.mountPath $w.dataRoot) -}}
{{- end -}}
{{- if $w.dataRoot -}}
{{- clean $w.dataRoot -}}
{{- else if $volume.enabled -}}
{{- clean $volume.mountPath -}}
{{- end -}}
{{- end -}}

{{/* "true" when path (absolute) is root or lies under it, lexically; else empty. */}}
{{- define "tributary.pathIsUnder" -}}
{{- $path := clean .path -}}
{{- $root := clean .root -}}
{{- if or (eq $root "/") (eq $path $root) (hasPrefix (printf "%s/" $root) $path) -}}
true
{{- end -}}
{{- end -}}

{{/* The cluster secret's Secret name (key `token`): an existing one, or the chart's. */}}
{{- define "tributary.clusterTokenSecret" -}}
{{- if and .Values.clusterToken.existingSecret .Values.clusterToken.value -}}
{{- fail "clusterToken: set either existingSecret or value, not both" -}}
{{- end -}}
{{- if .Values.clusterToken.existingSecret -}}
{{- .Values.clusterToken.existingSecret -}}
{{- else -}}
{{- include "tributary.fullname" . }}-cluster-token
{{- end -}}
{{- end -}}

{{/* The cluster secret's volume mount and volume, for every pod's container and spec. */}}
{{- define "tributary.clusterTokenMount" -}}
{{- if not .Values.clusterToken.allowUnauthenticated }}
- name: cluster-token
  mountPath: /etc/tributary/cluster-token
  readOnly: true
{{- end }}
{{- end -}}
{{- define "tributary.clusterTokenVolume" -}}
{{- if not .Values.clusterToken.allowUnauthenticated }}
- name: cluster-token
  secret:
    secretName: {{ include "tributary.clusterTokenSecret" . }}
    defaultMode: 0440
{{- end }}
{{- end -}}
