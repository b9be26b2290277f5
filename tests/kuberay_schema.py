"""The RayJob fields of KubeRay's ``ray.io/v1`` API that the product's overlays may use,
as a JSON schema that refuses any other field (a misspelt ``maxReplica`` fails, as
KubeRay's own structural schema prunes it away silently).  Written from KubeRay's
published API reference (RayJobSpec, RayClusterSpec, AutoscalerOptions, HeadGroupSpec,
WorkerGroupSpec); the pod templates inside are checked separately, strictly, against
Kubernetes' own PodTemplate schema (tests/test_deploy.py)."""

from __future__ import annotations

from typing import Any

__all__ = ["RAY_JOB", "bounds_hold"]

_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_INT32 = {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}
_OBJECT = {"type": "object"}  # a Kubernetes type checked elsewhere (a pod template)


def _closed(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required),
            "additionalProperties": False}  # fmt: skip


_AUTOSCALER = _closed({
    "upscalingMode": {"enum": ["Default", "Aggressive", "Conservative"]},
    "idleTimeoutSeconds": _INT32, "image": {"type": "string"},
    "imagePullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
    "resources": _OBJECT, "env": {"type": "array"}, "envFrom": {"type": "array"},
    "volumeMounts": {"type": "array"}, "securityContext": _OBJECT,
    "version": {"enum": ["v1", "v2"]},
})  # fmt: skip
_HEAD = _closed({
    "rayStartParams": _STRINGS, "template": _OBJECT, "serviceType": {"type": "string"},
    "enableIngress": {"type": "boolean"}, "headService": _OBJECT, "resources": _STRINGS,
    "labels": _STRINGS,
}, required=("template",))  # fmt: skip
_WORKERS = _closed({
    "groupName": {"type": "string", "minLength": 1}, "replicas": _INT32,
    "minReplicas": _INT32, "maxReplicas": _INT32, "idleTimeoutSeconds": _INT32,
    "numOfHosts": {"type": "integer", "minimum": 1}, "rayStartParams": _STRINGS,
    "template": _OBJECT, "scaleStrategy": _OBJECT, "suspend": {"type": "boolean"},
    "resources": _STRINGS, "labels": _STRINGS,
}, required=("groupName", "template"))  # fmt: skip
_CLUSTER = _closed({
    "rayVersion": {"type": "string"}, "enableInTreeAutoscaling": {"type": "boolean"},
    "autoscalerOptions": _AUTOSCALER, "headGroupSpec": _HEAD,
    "workerGroupSpecs": {"type": "array", "items": _WORKERS},
    "headServiceAnnotations": _STRINGS, "suspend": {"type": "boolean"},
    "managedBy": {"type": "string"}, "gcsFaultToleranceOptions": _OBJECT,
    "authOptions": _OBJECT, "upgradeStrategy": _OBJECT,
}, required=("headGroupSpec",))  # fmt: skip
_SPEC = _closed({
    "entrypoint": {"type": "string"},
    "submissionMode": {"enum": ["K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"]},
    "shutdownAfterJobFinishes": {"type": "boolean"}, "ttlSecondsAfterFinished": _INT32,
    "activeDeadlineSeconds": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
    "backoffLimit": _INT32, "rayClusterSpec": _CLUSTER, "clusterSelector": _STRINGS,
    "runtimeEnvYAML": {"type": "string"}, "jobId": {"type": "string"},
    "metadata": _STRINGS, "entrypointNumCpus": {"type": "number"},
    "entrypointNumGpus": {"type": "number"}, "entrypointResources": {"type": "string"},
    "submitterPodTemplate": _OBJECT, "submitterConfig": _OBJECT,
    "suspend": {"type": "boolean"}, "managedBy": {"type": "string"},
    "deletionStrategy": _OBJECT,
}, required=("entrypoint",))  # fmt: skip

#: A RayJob resource: its kind, its metadata (a name) and the spec above.
RAY_JOB = _closed({
    "apiVersion": {"const": "ray.io/v1"}, "kind": {"const": "RayJob"},
    "metadata": {"type": "object", "required": ["name"]}, "spec": _SPEC,
}, required=("apiVersion", "kind", "metadata", "spec"))  # fmt: skip


def bounds_hold(group: dict[str, Any]) -> bool:
    """KubeRay's rule for a workers group: minReplicas <= replicas <= maxReplicas."""
    low, high = group.get("minReplicas", 0), group.get("maxReplicas", 2**31 - 1)
    return bool(low <= group.get("replicas", low) <= high)
