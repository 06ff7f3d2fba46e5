{{/*
Render-time checks of the settings, mirroring what the controller's settings reader
(joiner_model::settings::Settings::from_values) refuses, so a bad value fails `helm install`
instead of crash-looping the controller. Included by configmap.yaml; renders nothing.
*/}}
{{- define "joiner.validate" -}}
{{- $s := .Values.settings }}
{{- if not $s.clusterName }}
{{- fail "settings.clusterName is required: set it to the EKS cluster's name (--set settings.clusterName=<name>)" }}
{{- end }}
{{- $enableDRA := eq (toString $s.enableDRA) "true" }}
{{- $ignoreSet := not (kindIs "invalid" $s.ignoreDRARequests) }}
{{- $nvidiaSet := not (kindIs "invalid" $s.awsFeatureGates.draNVIDIAGPU) }}
{{- $efaSet := not (kindIs "invalid" $s.awsFeatureGates.draEFA) }}
{{- if and $enableDRA (or $ignoreSet $nvidiaSet $efaSet) }}
{{- fail "settings.enableDRA cannot be combined with settings.ignoreDRARequests or settings.awsFeatureGates.draNVIDIAGPU / draEFA: enableDRA already turns on both DRA gates and stops ignoring DRA requests; set either enableDRA or the individual settings" }}
{{- end }}
{{- $anyGate := or (eq (toString $s.awsFeatureGates.draNVIDIAGPU) "true") (eq (toString $s.awsFeatureGates.draEFA) "true") }}
{{- if and (eq (toString $s.ignoreDRARequests) "true") $anyGate }}
{{- fail "settings.ignoreDRARequests: true contradicts an enabled DRA gate in settings.awsFeatureGates: a DRA gate needs DRA requests to be honoured" }}
{{- end }}
{{- range $key := list "enableDRA" "ignoreDRARequests" }}
{{- $v := index $s $key }}
{{- if not (or (kindIs "invalid" $v) (kindIs "bool" $v) (eq (toString $v) "true") (eq (toString $v) "false")) }}
{{- fail (printf "settings.%s: expected true or false" $key) }}
{{- end }}
{{- end }}
{{- range $key := list "batchIdleDuration" "batchMaxDuration" }}
{{- $v := index $s $key }}
{{- if not (kindIs "invalid" $v) }}
{{- if not (and (kindIs "string" $v) (regexMatch "^([0-9]+(\\.[0-9]*)?(ns|us|µs|ms|s|m|h))+$|^0$" $v)) }}
{{- fail (printf "settings.%s: expected a duration string such as \"10s\" or \"1m30s\"" $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- $version := $s.cluster.kubernetesVersion }}
{{- if not (kindIs "invalid" $version) }}
{{- if not (and (kindIs "string" $version) (regexMatch "^v?[0-9]+\\.[0-9]+(\\.[0-9]+)*$" $version)) }}
{{- fail "settings.cluster.kubernetesVersion: expected a quoted version such as \"1.36\" (YAML reads 1.30 unquoted as the number 1.3)" }}
{{- end }}
{{- end }}
{{- $cm := $s.nvidiaDevicePlugin.configMap }}
{{- if not (kindIs "invalid" $cm) }}
{{- if not (and (kindIs "string" $cm) (regexMatch "^[^/]+/[^/]+$" $cm)) }}
{{- fail "settings.nvidiaDevicePlugin.configMap: expected namespace/name, such as kube-system/nvidia-device-plugin" }}
{{- end }}
{{- end }}
{{- $migCm := $s.nvidiaMigManager.configMap }}
{{- if not (kindIs "invalid" $migCm) }}
{{- if not (and (kindIs "string" $migCm) (regexMatch "^[^/]+/[^/]+$" $migCm)) }}
{{- fail "settings.nvidiaMigManager.configMap: expected namespace/name, such as gpu-operator/default-mig-parted-config" }}
{{- end }}
{{- end }}
{{- $overhead := $s.vmMemoryOverheadPercent }}
{{- if not (kindIs "invalid" $overhead) }}
{{- if not (and (or (kindIs "float64" $overhead) (kindIs "int64" $overhead)) (ge (float64 $overhead) (float64 0)) (lt (float64 $overhead) (float64 1))) }}
{{- fail "settings.vmMemoryOverheadPercent: expected a fraction between 0 and 1, such as 0.075" }}
{{- end }}
{{- end }}
{{- include "joiner.validateGates" (list "settings.featureGates" $s.featureGates) }}
{{- include "joiner.validateGates" (list "settings.cluster.featureGates" $s.cluster.featureGates) }}
{{- if not (or (kindIs "invalid" $s.zones) (kindIs "slice" $s.zones)) }}
{{- fail "settings.zones: expected a list of zones, such as {us-east-1a,us-east-1b}" }}
{{- end }}
{{- end }}

{{/* A map of feature gates: (list "<path>" <map>) with every value true or false. */}}
{{- define "joiner.validateGates" -}}
{{- $path := index . 0 }}
{{- $gates := index . 1 }}
{{- if not (or (kindIs "invalid" $gates) (kindIs "map" $gates)) }}
{{- fail (printf "%s: expected a map of names to true or false" $path) }}
{{- end }}
{{- if kindIs "map" $gates }}
{{- range $name, $on := $gates }}
{{- if not (or (kindIs "bool" $on) (eq (toString $on) "true") (eq (toString $on) "false")) }}
{{- fail (printf "%s.%s: expected true or false" $path $name) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
