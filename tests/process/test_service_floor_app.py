"""bench/service_floor_app.py (the service minus the model) starts as a process, as bench.ab and
the bench suite run it, and answers the task endpoints with its constant answer (a start-up failure
of this app would otherwise go unnoticed)."""

from __future__ import annotations

import json
import urllib.request

from bench import servers


def _post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, json.loads(response.read())


def test_service_minus_model_starts_and_answers(service_bundles, tmp_path):
    spec = servers.service_minus_model_spec(servers.free_port(), service_bundles, "nli,fever",
                                            max_batch_size=8, max_batch_delay_ms=1.0, intra_op_threads=1)
    with servers.Server(spec, None, tmp_path / "logs") as server:
        status, answer = _post(server.url + "/entailment", {"premise": "a man is playing a guitar .",
                                                             "hypothesis": "nobody is playing music ."})
        assert status == 200
        assert answer["label"] == "entailment"  # the constant answer: row 0 of the labels
        assert answer["scores"] == {"entailment": 1 / 3, "neutral": 1 / 3, "contradiction": 1 / 3}

        pairs = [{"premise": "two dogs run", "hypothesis": "dogs are running"}] * 3
        status, answer = _post(server.url + "/entailment", {"inputs": pairs})
        assert status == 200 and len(answer["results"]) == 3

        evidence = ["paris is the capital of france .", "berlin is a city ."]
        status, answer = _post(server.url + "/verify", {"claim": "paris is in france", "evidence": evidence})
        assert status == 200
        assert answer["evidence_scores"] == [0.0, 0.0]
