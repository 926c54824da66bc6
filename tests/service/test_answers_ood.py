"""The answers' out-of-domain signal, `unknown_token_share` (docs/answers.md), on the
shipped bundles: text made of words the model never saw scores high whatever the label's
confidence, text of the model's own domain low, and the figure is the explanation's own
count of `unknown` tokens."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.bundles import running_app
from service.settings import Settings

REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"

CASES = [
    # model, text, the bounds its unknown_token_share must fall in
    ("bbc-act", "Shares in the bank fell sharply after it reported a loss for the quarter.", 0.0, 0.2),
    ("bbc-act", "The government will publish its election manifesto on Monday, the minister said.", 0.0, 0.2),
    ("bbc-act", "zqxv wkjd plmq brzt", 0.5, 1.0),
    ("bbc-act", "Der Hund schläft im Garten.", 0.5, 1.0),
    ("tweets-act", "thank you so much, great service!", 0.0, 0.2),
    ("tweets-act", "zqxv wkjd plmq brzt", 0.5, 1.0),
]


@pytest.fixture(scope="module")
def answers():
    async def scenario():
        settings = Settings(model_repository=[REPOSITORY], models=["bbc-act", "tweets-act"], max_batch_delay_ms=1)
        async with running_app(settings) as (app, client):
            out = []
            for model, text, *_ in CASES:
                r = await client.post("/classify", json={"text": text, "model": model, "explain": True})
                assert r.status_code == 200, r.text
                out.append(r.json())
            return out
    return asyncio.run(scenario())


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{c[0]}-{c[1][:24]}" for c in CASES])
def test_unknown_token_share_separates_gibberish_from_in_vocabulary_text(answers, i):
    model, text, low, high = CASES[i]
    answer = answers[i]
    assert low <= answer["unknown_token_share"] <= high, (text, answer["unknown_token_share"])
    tokens = answer["explanation"]["tokens"]["text"]
    assert answer["unknown_token_share"] == round(sum(t["unknown"] for t in tokens) / len(tokens), 4)


def test_gibberish_still_gets_a_confident_label(answers):
    """Why the field exists: the scores alone do not say the text is foreign to the model."""
    gibberish = answers[2]
    assert gibberish["unknown_token_share"] > 0.5 and max(gibberish["scores"].values()) > 0.5
