"""POST /tokenize (issue 54): the tokens a model reads, their offsets into the text as sent,
ids, unknown flags, counts and truncation; the task endpoints' auth, limits and errors.

The property test draws texts over Unicode (combining marks, emoji, CJK, characters NFKC
expands into several, full-width forms, the PTB escapes the tokenizer replaces, words of the
vocabulary, odd whitespace) and checks that the offsets re-cut the original text exactly:
each token's span, normalized by the tokenizer's own normalizer, is the token; what lies
between spans is whitespace; and the ids are those the batcher feeds the model.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

from service.inference.runtime import ModelRuntime, requested_providers
from service.settings import Settings
from service.http.tokenize import tokenize_inputs
from tests.bundles import CORPUS, running_app

# Unicode's White_Space characters: what the WhitespaceSplit pre-tokenizer splits at (Rust's
# char::is_whitespace), after NFKC
WHITE_SPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
                        "\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
WORDS = sorted({w for line in CORPUS for w in line.split()})
# characters NFKC turns into several (U+FDFA into 18), ligatures, circled and parenthesized forms
EXPANDING = "\ufb01\ufb00\u2474\u338f\ufdfa\u00bd\u216b\u01c6\u3250\u2116\u00b5\u1e9b\u0149"
MARKS = st.characters(min_codepoint=0x300, max_codepoint=0x36F)  # combining marks
PIECES = st.one_of(
    st.sampled_from(WORDS),
    # a word and marks NFKC composes into its last letter ("man" + U+0301 -> "mań") or leaves apart
    st.tuples(st.sampled_from(WORDS), st.lists(MARKS, min_size=1, max_size=3).map("".join)).map("".join),
    # Hangul jamo, which NFKC composes into syllables
    st.tuples(st.characters(min_codepoint=0x1100, max_codepoint=0x1112),
              st.characters(min_codepoint=0x1161, max_codepoint=0x1175),
              st.sampled_from(["", "\u11a8", "\u11ab", "\u11af"])).map("".join),
    st.sampled_from(["-LRB-", "-RRB-", "-LSB-", "-RSB-", "-LCB-", "-RCB-"]),
    st.sampled_from(list(EXPANDING)),
    st.sampled_from([" ", "  ", "\t", "\n", "\u3000", "\u00a0", "\u2009", "\x1c"]),
    MARKS,
    st.characters(min_codepoint=0x1F300, max_codepoint=0x1F64F),  # emoji
    st.characters(min_codepoint=0x4E00, max_codepoint=0x4FFF),  # CJK
    st.characters(min_codepoint=0xFF01, max_codepoint=0xFF5E),  # full-width forms
    st.characters(codec="utf-8", exclude_categories=("Cs",)),  # anything else
)
TEXTS = st.lists(PIECES, min_size=1, max_size=30).map("".join).filter(lambda t: t.strip())


@pytest.fixture(scope="module")
def nli_runtime(service_bundles) -> ModelRuntime:
    return ModelRuntime.load(service_bundles / "nli", requested_providers("cpu"), threads=1)


def check_recut(runtime: ModelRuntime, text: str, described: dict, max_length: int) -> None:
    """The offsets of `described` (one text's /tokenize entry) re-cut `text` exactly."""
    normalize = runtime.encoder.tokenizer.normalizer.normalize_str
    tokens = described["tokens"]
    assert described["max_length"] == max_length
    assert len(tokens) == min(described["count"], max_length)
    assert described["truncated"] == (described["count"] > max_length)
    at = 0
    spans = [(t["start"], t["end"]) for t in tokens]
    for k, (start, end) in enumerate(spans):
        assert 0 <= start < end <= len(text), (text, tokens[k])
        if k and spans[k - 1] == (start, end):
            continue  # one character NFKC made several tokens of ("\u2474" -> "(", "1", ")")
        gap = text[at:start]
        assert set(normalize(gap)) <= WHITE_SPACE, (text, at, start, gap)
        piece = normalize(text[start:end])
        group = [t for t, span in zip(tokens, spans) if span == (start, end)]
        if len(group) == 1:
            assert group[0]["token"] == piece, (text, group[0], piece)
        else:  # the known ones are the piece's tokens, in order; an unknown one shows the whole piece
            rest = piece
            for t in group:
                if t["unknown"]:
                    assert t["token"] == piece
                else:
                    assert t["token"] in rest, (text, group, piece)
                    rest = rest[rest.index(t["token"]) + len(t["token"]):]
        at = end
    if not described["truncated"]:
        assert set(normalize(text[at:])) <= WHITE_SPACE, (text, at)


@hypothesis_settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(premise=TEXTS, hypothesis=TEXTS)
def test_offsets_recut_the_original_text_and_ids_are_what_the_model_reads(nli_runtime, premise, hypothesis):
    [fields] = tokenize_inputs(nli_runtime, [SimpleNamespace(premise=premise, hypothesis=hypothesis)])
    lengths = nli_runtime.config.max_lengths
    check_recut(nli_runtime, premise, fields["premise"], lengths["premise_ids"])
    check_recut(nli_runtime, hypothesis, fields["hypothesis"], lengths["hypothesis_ids"])
    # the ids the batcher encodes (no describe: the ASCII rules where they apply) are those listed
    for name, text in (("premise", premise), ("hypothesis", hypothesis)):
        max_length = lengths[f"{name}_ids"]
        encoded = nli_runtime.encoder.encode([text], max_length)
        assert [t["id"] for t in fields[name]["tokens"]] == encoded.ids[0]
        assert fields[name]["count"] == len(encoded.ids[0]) + encoded.cut[0]
        assert [t["unknown"] for t in fields[name]["tokens"]] == [nli_runtime.encoder.is_unknown(i)
                                                                 for i in encoded.ids[0]]


def test_expanding_and_combining_characters_keep_their_source_spans(nli_runtime):
    text = "Caf\u0065\u0301 \u2474 -LRB- x\ufb01 \U0001F3B8"
    [fields] = tokenize_inputs(nli_runtime, [SimpleNamespace(premise=text, hypothesis="a")])
    cut = [(t["token"], text[t["start"]:t["end"]]) for t in fields["premise"]["tokens"]]
    # e + U+0301 compose into one character: the span covers both code points
    assert cut[0] == ("caf\u00e9", "Caf\u0065\u0301")
    # U+2474 becomes "(", "1", ")": three tokens, each spanning the one character sent
    assert [source for _, source in cut[1:4]] == ["\u2474"] * 3
    # the PTB escape is replaced by "(" and spans the five characters sent
    assert cut[4] == ("(", "-LRB-")
    assert cut[5][1] == "x\ufb01" and cut[6][1] == "\U0001F3B8"


def request(client, body, **kwargs):
    return client.post("/tokenize", json=body, **kwargs)


def test_tokenize_endpoint_answers_and_refuses_like_the_task_endpoints(service_bundles):
    settings = Settings(model_repository=service_bundles, max_batch_delay_ms=1, max_text_chars=300,
                        max_inputs_per_request=3, max_body_bytes=4096)
    long_premise = " ".join(["the stock market fell"] * 10)  # 40 tokens, the nli premise takes 24

    async def scenario():
        async with running_app(settings) as (app, client):
            out = {}
            out["single"] = await request(client, {"premise": "A man plays", "hypothesis": "music", "lang": "en"})
            out["batch"] = await request(client, {"inputs": [{"premise": "a", "hypothesis": "b"},
                                                             {"premise": long_premise, "hypothesis": "c"}]})
            out["entailment"] = await client.post("/entailment", json={"premise": long_premise, "hypothesis": "c"})
            out["named"] = await request(client, {"model": "fever", "claim": "paris", "evidence": ["a b", "c"]})
            out["classify"] = await request(client, {"text": "the team won", "model": "topic"})
            out["no_fields"] = await request(client, {"foo": "bar"})
            out["unknown_model"] = await request(client, {"model": "nope", "text": "x"})
            out["wrong_task"] = await request(client, {"model": "nli", "text": "x"})
            out["empty"] = await request(client, {"text": "   ", "model": "topic"})
            out["too_long"] = await request(client, {"text": "a" * 301, "model": "topic"})
            out["too_many"] = await request(client, {"inputs": [{"text": "a"}] * 4, "model": "topic"})
            out["evidence"] = await request(client, {"claim": "a", "evidence": ["b"] * 6})
            out["body"] = await request(client, {"text": "a " * 3000, "model": "topic"})
            out["not_json"] = await client.post("/tokenize", content=b"text=a", headers={"content-type": "text/plain"})
            out["openapi"] = await client.get("/openapi.json")
            out["metrics"] = await client.get("/metrics")
            return out

    out = asyncio.run(scenario())
    single = out["single"]
    assert single.status_code == 200, single.text
    assert single.headers["x-attserve-ignored-fields"] == "lang"
    body = single.json()
    assert (body["model"], body["version"]) == ("nli", "test-1")
    premise = body["fields"]["premise"]
    assert [(t["token"], t["start"], t["end"]) for t in premise["tokens"]] == [("a", 0, 1), ("man", 2, 5),
                                                                                ("plays", 6, 11)]
    assert premise["count"] == 3 and premise["max_length"] == 24 and premise["truncated"] is False
    assert [t["unknown"] for t in premise["tokens"]] == [False, False, True]  # "plays" is not in the corpus

    assert out["batch"].status_code == 200, out["batch"].text
    batch = out["batch"].json()["results"]
    assert [r["fields"]["premise"]["truncated"] for r in batch] == [False, True]
    assert batch[1]["fields"]["premise"]["count"] == 40 and len(batch[1]["fields"]["premise"]["tokens"]) == 24
    # the task endpoint cuts the same text
    assert out["entailment"].json()["truncated"] is True

    named = out["named"].json()
    assert named["model"] == "fever"
    assert [e["count"] for e in named["fields"]["evidence"]] == [2, 1]
    assert out["classify"].json()["fields"]["text"]["count"] == 3

    def error(name):
        response = out[name]
        return response.status_code, response.json()["error"]["code"], response.json()["error"]["message"]

    assert error("no_fields")[:2] == (422, "invalid_input") and "premise + hypothesis" in error("no_fields")[2]
    assert error("unknown_model")[:2] == (422, "unknown_model")
    assert error("wrong_task")[:2] == (422, "invalid_input") and "premise" in error("wrong_task")[2]
    assert error("empty")[:2] == (422, "invalid_input")
    assert error("too_long")[:2] == (422, "invalid_input") and "ATTSERVE_MAX_TEXT_CHARS" in error("too_long")[2]
    assert error("too_many")[:2] == (422, "too_many_inputs")
    assert error("evidence")[:2] == (422, "too_many_evidence")
    assert error("body")[:2] == (413, "body_too_large")
    assert error("not_json")[:2] == (415, "unsupported_media_type")
    assert "/tokenize" in out["openapi"].json()["paths"]
    # counted as the task endpoints are: the single and the batch request on nli
    assert 'attserve_requests_total{endpoint="tokenize",model="nli",status="200"} 2.0' in out["metrics"].text


def test_tokenize_needs_the_api_key(service_bundles):
    key = "key-one-0123456789"
    settings = Settings(model_repository=service_bundles, max_batch_delay_ms=1, api_keys=key)

    async def scenario():
        async with running_app(settings) as (app, client):
            return (await request(client, {"text": "a", "model": "topic"}),
                    await request(client, {"text": "a", "model": "topic"}, headers={"authorization": f"Bearer {key}"}))

    refused, allowed = asyncio.run(scenario())
    assert (refused.status_code, refused.json()["error"]["code"]) == (401, "unauthorized")
    assert allowed.status_code == 200
