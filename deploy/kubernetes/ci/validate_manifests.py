"""Validates rendered Kubernetes objects against the JSON schemas of a Kubernetes release
(kubernetes-validate's bundled schemas, strict: unknown fields are errors). Run with the venv
that deploy/kubernetes/ci-deps.sh makes:

    .tools/venv/bin/python ci/validate_manifests.py --kubernetes-version 1.37 FILE.yaml ...

Built-in kinds are validated whole. A KServe InferenceService (no schema of its CRD is published
in a package registry) is validated where its schema is Kubernetes' own: its predictor is a
core PodSpec inlined with KServe's component fields, so the predictor less those fields must
pass the strict PodSpec schema. Other custom resources are reported as "noschema" (the
ServiceMonitor is checked by ci/validate-custom-resources.mjs). Prints one JSON object per
line: {"file", "kind", "name", "status": "ok" | "error" | "noschema", "message"}; exits 1 when
any object has status "error".
"""

from __future__ import annotations

import argparse
import json
import sys

import kubernetes_validate
from kubernetes_validate.utils import SchemaNotFoundError, ValidationError, resources_from_file

# serving.kserve.io/v1beta1 PredictorSpec: the fields KServe adds to the inlined PodSpec
# (ComponentExtensionSpec and the predictor's framework specs), per KServe's API reference.
KSERVE_PREDICTOR_FIELDS = {
    "minReplicas", "maxReplicas", "scaleTarget", "scaleMetric", "scaleMetricType", "autoScaling",
    "containerConcurrency", "timeout", "canaryTrafficPercent", "logger", "batcher", "labels",
    "annotations", "deploymentStrategy", "workerSpec", "model",
    "sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx", "huggingface", "pmml",
    "lightgbm", "paddle",
}


def validate_inference_service(resource: dict, version: str) -> None:
    predictor = resource["spec"]["predictor"]
    pod_spec = {k: v for k, v in predictor.items() if k not in KSERVE_PREDICTOR_FIELDS}
    # kubernetes-validate looks a schema up by kind: validate the PodSpec as a Pod's spec
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": resource["metadata"]["name"]}, "spec": pod_spec}
    kubernetes_validate.validate(pod, version, strict=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubernetes-version", required=True)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    failed = False
    for filename in args.files:
        for resource in resources_from_file(filename):
            record = {"file": filename, "kind": resource.get("kind"), "name": resource.get("metadata", {}).get("name"),
                      "status": "ok", "message": ""}
            try:
                if resource.get("apiVersion", "").startswith("serving.kserve.io/") and resource["kind"] == "InferenceService":
                    validate_inference_service(resource, args.kubernetes_version)
                else:
                    kubernetes_validate.validate(resource, args.kubernetes_version, strict=True)
            except ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                record.update(status="error", message=f"{path}: {exc.message}")
                failed = True
            except SchemaNotFoundError as exc:
                record.update(status="noschema", message=exc.message)
            print(json.dumps(record))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
