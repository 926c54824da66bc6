// Validates custom resources against the JSON schemas of their CRDs (the validators that
// kubernetes-models generates from the upstream CRDs). Reads a JSON array of objects on stdin,
// prints one line per object ("ok KIND/NAME" or "error KIND/NAME: ...") and exits 1 if any
// failed, 2 for a kind it has no schema for. Used by tests/deploy/test_kubernetes.py.
import { readFileSync } from "node:fs";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";

const models = {
  "monitoring.coreos.com/v1/ServiceMonitor": ServiceMonitor,
};

let status = 0;
for (const object of JSON.parse(readFileSync(0, "utf8"))) {
  const key = `${object.apiVersion}/${object.kind}`;
  const name = `${object.kind}/${object.metadata?.name}`;
  const Model = models[key];
  if (!Model) {
    console.log(`noschema ${name}: no schema for ${key}`);
    status = Math.max(status, 2);
    continue;
  }
  try {
    new Model(object).validate();
    console.log(`ok ${name}`);
  } catch (error) {
    console.log(`error ${name}: ${error.message}`);
    status = Math.max(status, 1);
  }
}
process.exit(status);
