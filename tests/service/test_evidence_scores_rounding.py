"""`evidence_scores` are float32 graph outputs: sent to 6 decimals, not as float32's noise
printed as a double (0.009999999776482582 for 0.01, issue 56). On the shipped /verify model: its
shares (0.01, 0.99 in the README's example) are no binary fractions, which float32 cannot hold
exactly; the test bundles' shares happen to be, so they cannot show the noise."""

from __future__ import annotations

import asyncio
from pathlib import Path

from service.settings import Settings
from tests.bundles import running_app

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"
CLAIM = "Nikolaj Coster-Waldau is a Danish actor."  # the README's /verify example
EVIDENCE = ["The Amazon River flows through Brazil, Peru and Colombia.",
            "Nikolaj Coster-Waldau (born 27 July 1970) is a Danish actor and producer.",
            "Copenhagen is the capital of Denmark."]


def test_evidence_scores_carry_six_decimals_and_no_float32_noise():
    async def scenario():
        settings = Settings(model_repository=REPOSITORY, models=["fever-attconv"], max_batch_delay_ms=1)
        async with running_app(settings) as (_, client):
            one = await client.post("/verify", json={"claim": CLAIM, "evidence": EVIDENCE[:2]})
            many = await client.post("/verify", json={"inputs": [{"claim": CLAIM, "evidence": EVIDENCE[::-1]},
                                                                  {"claim": "Denmark has a capital.", "evidence": EVIDENCE}]})
            return one, many

    one, many = asyncio.run(scenario())
    assert one.status_code == 200 and many.status_code == 200, (one.text, many.text)
    assert one.json()["evidence_scores"] == [0.01, 0.99]  # as the README shows it
    scores = [one.json()["evidence_scores"], *(r["evidence_scores"] for r in many.json()["results"])]
    assert [len(s) for s in scores] == [2, 3, 3]
    for row in scores:
        assert all(isinstance(s, float) and s == round(s, 6) for s in row), row
        assert abs(sum(row) - 1) <= 1e-5 * len(row), row  # shares of the claim: still summing to 1
