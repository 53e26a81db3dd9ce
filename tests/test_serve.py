"""logitjudge serve (issue 54 item 1): /v1/judge equals lj.score and lj.analyze on the same items and orders, alone
or merged with concurrent requests; /v1/score answers as SGLang's /v1/score on a planted case; bad requests get one
JSON error naming the field while the service keeps serving; a client that disconnects frees its queued work."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

import logitjudge as lj
from logitjudge.cli import main
from logitjudge.serve.app import Limits, create_app

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["Once upon a time a cat sat on the mat.", "The text is clear, well written and correct.",
         "Very poor. Worst.", "The article says that the economy grew by three percent.",
         "Poor. Fair. Good.", "the dog barked at the moon while the sun rose slowly."]


def items(texts, prefix="t", context=None):
    return [{"id": f"{prefix}{i}", "text": t, **({"context": context} if context else {})}
            for i, t in enumerate(texts)]


@pytest.fixture(scope="module")
def judge(tiny_lm):
    return tiny_lm  # the session's tiny random-weight Gemma-3 (nothing here changes it)


@pytest.fixture(scope="module")
def client(judge, tmp_path_factory):
    out = tmp_path_factory.mktemp("serve-out")
    with TestClient(create_app(judge, Limits(api_key="sesame", max_items=8, window_s=0.01, out=str(out)))) as c:
        c.headers["Authorization"] = "Bearer sesame"
        c.out = out
        yield c


def check_equals_score(answer: dict, judge, rows, orderings="balanced", seed=0, tol=1e-9):
    """Every number of a /v1/judge answer against lj.score + lj.analyze on the same rows."""
    res = lj.score(judge, rows, orderings=orderings, seed=seed, progress=False)
    t, report = res.table, lj.analyze(res, n_boot=200)
    pride = report.scores.set_index("item_id")["pride"]
    assert [a["id"] for a in answer["items"]] == [r["id"] for r in rows]
    for i, a in enumerate(answer["items"]):
        c = a["criteria"][0]
        mean = t.probs[i, 0].mean(axis=0)
        np.testing.assert_allclose(c["distribution"], mean, atol=tol, rtol=0)
        np.testing.assert_allclose([o["distribution"] for o in c["orders"]], t.probs[i, 0], atol=tol, rtol=0)
        assert c["expected"] == pytest.approx(float(mean @ t.values[0]), abs=tol)
        assert c["debiased"] == pytest.approx(float(pride[r["id"]] if (r := rows[i]) else 0), abs=tol)
        assert c["label_mass"] == pytest.approx(float(t.label_mass[i, 0].mean()), abs=tol)
        # hold: the share of the orders whose most probable label is the averaged top label (by hand)
        assert c["hold"] == pytest.approx(float(np.mean(t.probs[i, 0].argmax(axis=1) == mean.argmax())), abs=1e-12)
        assert c["top_label"] == c["labels"][int(mean.argmax())]
    chi = report.results["position"]["Quality"]["chi_square"]
    b = answer["bias"]["Quality"]
    assert b["p_value"] == pytest.approx(chi["pvalue"]) and b["cramers_v"] == pytest.approx(chi["cramers_v"])
    assert b["favoured_positions"] == [p + 1 for p in chi["favoured_index"]]  # numbered from 1
    assert "greedy" in b["reading"] and "items as clusters" in b["test"]
    return t


def test_judge_equals_lj_score_and_analyze(client, judge):
    rows = items(TEXTS[:4], context="Rate this.")
    r = client.post("/v1/judge", json={"rubric": "default", "items": rows, "orderings": "balanced",
                                       "per_order": True})
    assert r.status_code == 200, r.text
    ans = r.json()
    t = check_equals_score(ans, judge, rows)
    assert ans["n_orders"] == 10 and set(ans["readings"]) >= {"expected", "debiased", "hold", "bias"}
    # --out: the request's table, nothing else
    saved = sorted(p.name for p in client.out.iterdir())
    assert saved == [ans["table"].rsplit("/", 1)[-1]]
    assert np.array_equal(lj.api.ScoreTable.load(ans["table"]).probs, t.probs)


def test_random_orders_and_inline_rubric_equal_lj_score(client, judge):
    rubric = {"name": "three", "criteria": [{"name": "Quality", "description": "overall", "options": [
        {"value": 0, "label": "1", "description": "bad"}, {"value": 1, "label": "2", "description": "good"},
        {"value": 2, "label": "3", "description": "great"}]}]}
    rows = items(TEXTS[:3])
    r = client.post("/v1/judge", json={"rubric": rubric, "items": rows, "orderings": "random:4", "seed": 3,
                                       "per_order": True})
    assert r.status_code == 200, r.text
    from logitjudge.rubric import Rubric

    res = lj.score(judge, rows, rubric=Rubric.from_dict(rubric), orderings="random:4", seed=3, progress=False)
    got = np.array([[o["distribution"] for o in a["criteria"][0]["orders"]] for a in r.json()["items"]])
    np.testing.assert_allclose(got, res.table.probs[:, 0], atol=1e-9, rtol=0)
    assert r.json()["items"][0]["criteria"][0]["debiased"] is None  # no balanced rotations: PriDe says so
    bias, skipped = r.json()["bias"]["Quality"], lj.analyze(res, n_boot=0).results["skipped"]
    assert bias["tested"] is ("position.Quality.chi_square" not in skipped)  # as lj.analyze decides
    assert bias.get("reason") == skipped.get("position.Quality.chi_square")


@pytest.mark.parametrize("body, status, field", [
    ("{not json", 400, "body"),
    ({"rubric": "no_such_rubric", "items": [{"id": "a", "text": "x"}]}, 422, "rubric"),
    ({"rubric": "../../etc/passwd", "items": [{"id": "a", "text": "x"}]}, 422, "rubric"),
    ({"items": [{"id": "a", "text": "ok"}, {"id": "b", "text": ""}]}, 422, "items[1].text"),
    ({"items": [{"id": "a", "text": "   "}]}, 422, "items[0].text"),
    ({"items": [{"id": str(i), "text": "x"} for i in range(9)]}, 422, "items"),
    ({"items": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}, 422, "items[1].id"),
    ({"items": [{"id": "a", "text": "x"}], "orderings": "random"}, 422, "orderings"),
    ({"items": [{"id": "a", "text": "x"}], "template": "nope"}, 422, "template"),
    ({"items": [{"id": "a", "text": "x"}], "colour": "red"}, 422, "colour"),
    ({"items": [{"id": "a", "text": "ok"}, {"id": "b", "text": "word " * 2200}]}, 422, "items[1].text"),
])
def test_bad_requests_name_the_field_and_the_service_goes_on(client, body, status, field):
    kw = {"content": body, "headers": {"Content-Type": "application/json"}} if isinstance(body, str) else \
        {"json": body}
    r = client.post("/v1/judge", **kw)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["field"] == field and err["message"] and "\n" not in err["message"]
    ok = client.post("/v1/judge", json={"items": items(TEXTS[:1]), "orderings": "fixed"})
    assert ok.status_code == 200, ok.text


def test_api_key_body_size_health_models_openapi(judge):
    with TestClient(create_app(judge, Limits(api_key="k", max_body_bytes=300))) as c:
        body = {"items": items(TEXTS[:1]), "orderings": "fixed"}
        for headers, status in (({}, 401), ({"Authorization": "Bearer wrong"}, 401),
                                ({"Authorization": "Bearer k"}, 200)):
            r = c.post("/v1/judge", json=body, headers=headers)
            assert r.status_code == status, r.text
            if status == 401:
                assert r.json()["error"]["field"] == "authorization" and r.headers["WWW-Authenticate"] == "Bearer"
        big = c.post("/v1/judge", json={"items": items(["x" * 400])}, headers={"Authorization": "Bearer k"})
        assert big.status_code == 413 and big.json()["error"]["field"] == "body"
        assert c.get("/v1/models").status_code == 401
        assert c.get("/v1/models", headers={"Authorization": "Bearer k"}).json()["data"][0]["id"] == judge.model_id
        assert c.get("/health").json()["status"] == "ok"
        paths = c.get("/openapi.json").json()["paths"]
        assert {"/v1/judge", "/v1/score", "/health", "/v1/models"} <= set(paths)


def plain_label_logprobs(lm, ids, labels):
    with torch.inference_mode():
        logits = lm.model(input_ids=torch.tensor([ids])).logits[0, -1].double()
    return torch.log_softmax(logits, -1)[labels].numpy()


def test_score_answers_as_sglang_on_a_planted_case(client, judge):
    """SGLang's shape: scores[item] in label_token_ids order, exp(logprob) or the softmax over the labels;
    query + item (item + query with item_first) tokenized with special tokens; token ids concatenated."""
    tok = judge.tokenizer
    labels = [tok.convert_tokens_to_ids(x) for x in ("1", "2", "3")]
    query, its = "Score: the text is ", ["clear", "poor"]
    for item_first, softmax in ((False, False), (True, True)):
        r = client.post("/v1/score", json={"query": query, "items": its, "label_token_ids": labels,
                                           "apply_softmax": softmax, "item_first": item_first})
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["object"] == "scoring" and out["model"] == judge.model_id and len(out["scores"]) == 2
        for it, got in zip(its, out["scores"]):
            ids = tok(it + query if item_first else query + it)["input_ids"]
            lp = plain_label_logprobs(judge, ids, labels)
            want = np.exp(lp) / np.exp(lp).sum() if softmax else np.exp(lp)
            np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
    q, i = tok(query)["input_ids"], tok("clear", add_special_tokens=False)["input_ids"]
    r = client.post("/v1/score", json={"query": q, "items": [i], "label_token_ids": labels})
    np.testing.assert_allclose(r.json()["scores"][0], np.exp(plain_label_logprobs(judge, q + i, labels)), atol=1e-6)
    for body, field in (({"query": "x", "items": ["y"]}, "label_token_ids"),
                        ({"query": "x", "items": ["y"], "label_token_ids": [10**9]}, "label_token_ids"),
                        ({"query": "x", "items": [[1, 2]], "label_token_ids": labels}, "items"),
                        ({"query": "x", "items": ["y"], "label_token_ids": labels, "model": "other"}, "model")):
        r = client.post("/v1/score", json=body)
        assert r.status_code == 422 and r.json()["error"]["field"] == field, r.text


class Server:
    """A real uvicorn on 127.0.0.1 (a free port) in a thread, for concurrency and disconnects."""

    def __init__(self, app):
        import uvicorn

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        while not self.server.started:
            time.sleep(0.02)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)


def test_eight_concurrent_clients_get_the_answers_of_one(judge):
    app = create_app(judge, Limits(window_s=0.05))
    bodies = [{"items": items(TEXTS[k % 6:k % 6 + 1] + TEXTS[(k + 2) % 6:(k + 2) % 6 + 1], prefix=f"c{k}-"),
               "orderings": "balanced", "per_order": True} for k in range(8)]
    with Server(app) as url:
        alone = [httpx.post(f"{url}/v1/judge", json=b, timeout=60).json() for b in bodies]
        before = httpx.get(f"{url}/health").json()
        start, out = threading.Barrier(8), [None] * 8

        def client(k):
            start.wait()
            out[k] = httpx.post(f"{url}/v1/judge", json=bodies[k], timeout=60)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        after = httpx.get(f"{url}/health").json()
    assert all(r.status_code == 200 for r in out), [r.text for r in out]
    for one, many in zip(alone, (r.json() for r in out)):
        for a, b in zip(one["items"], many["items"]):
            assert a["id"] == b["id"]
            x, y = a["criteria"][0], b["criteria"][0]
            np.testing.assert_allclose([o["distribution"] for o in x["orders"]],
                                       [o["distribution"] for o in y["orders"]], atol=1e-6, rtol=0)
            assert x["debiased"] == pytest.approx(y["debiased"], abs=1e-6)
        assert one["bias"]["Quality"]["p_value"] == pytest.approx(many["bias"]["Quality"]["p_value"], abs=1e-6)
    # the 8 requests were merged: fewer lj.score calls than requests
    assert after["requests"] - before["requests"] == 8 and after["batches"] - before["batches"] < 8


def test_a_client_that_leaves_frees_its_queued_work(judge):
    app = create_app(judge, Limits(window_s=0.01))
    svc = app.state.service
    score = svc.batcher.score

    def slow(rows, **kw):  # holds the worker so that the next request waits in the queue
        time.sleep(1.0)
        return score(rows, **kw)

    svc.batcher.score = slow
    with Server(app) as url:
        first = threading.Thread(target=httpx.post, args=(f"{url}/v1/judge",),
                                 kwargs={"json": {"items": items(TEXTS[:2]), "orderings": "fixed"}, "timeout": 60})
        first.start()
        time.sleep(0.2)
        with pytest.raises(httpx.ReadTimeout):  # this client leaves while its request waits
            httpx.post(f"{url}/v1/judge", json={"items": items(TEXTS[2:5], "gone"), "orderings": "fixed"},
                       timeout=0.4)
        first.join()
        time.sleep(0.3)
        health = httpx.get(f"{url}/health").json()
        assert health["dropped"] == 1 and health["items_scored"] == 2 and health["waiting_items"] == 0
        ok = httpx.post(f"{url}/v1/judge", json={"items": items(TEXTS[:1]), "orderings": "fixed"}, timeout=60)
        assert ok.status_code == 200


def test_queue_full_is_429_with_retry_after(judge):
    app = create_app(judge, Limits(window_s=0.01, max_queue=3))
    svc = app.state.service
    score = svc.batcher.score
    svc.batcher.score = lambda rows, **kw: (time.sleep(0.8), score(rows, **kw))[1]
    with Server(app) as url:
        first = threading.Thread(target=httpx.post, args=(f"{url}/v1/judge",),
                                 kwargs={"json": {"items": items(TEXTS[:1]), "orderings": "fixed"}, "timeout": 60})
        first.start()
        time.sleep(0.2)
        waiting = threading.Thread(target=httpx.post, args=(f"{url}/v1/judge",),
                                   kwargs={"json": {"items": items(TEXTS[:3]), "orderings": "fixed"},
                                           "timeout": 60})
        waiting.start()
        time.sleep(0.2)
        r = httpx.post(f"{url}/v1/judge", json={"items": items(TEXTS[:1]), "orderings": "fixed"}, timeout=60)
        first.join()
        waiting.join()
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1 and r.json()["error"]["type"] == "queue_full"


def test_serve_flags_are_checked_before_the_judge_loads(capsys):
    assert main(["serve", "--max-items", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--max-items 0" in err[0]


def test_builtin_judge_equals_lj_score(gemma_lm):
    """logitjudge serve --model gemma-3-270m: /v1/judge's probabilities equal lj.score's (<= 1e-6)."""
    judge = gemma_lm
    rows = [{"id": "a", "text": "4", "context": "What is 2 + 2?"},
            {"id": "b", "text": "Two plus two is five.", "context": "What is 2 + 2?"}]
    with TestClient(create_app(judge)) as c:
        r = c.post("/v1/judge", json={"items": rows, "orderings": "balanced", "per_order": True})
    assert r.status_code == 200, r.text
    check_equals_score(json.loads(r.text), judge, rows, tol=1e-6)
