"""A promptfoo assertion scored by ``logitjudge serve``: ``get_assert(output, context)`` returns promptfoo's
GradingResult (``pass``, ``score``, ``reason``, ``namedScores``, ``metadata``).

In promptfooconfig.yaml::

    assert:
      - type: python
        value: file://PATH/TO/logitjudge/integrations/promptfoo_assert.py
        config: {url: "http://127.0.0.1:8000", rubric: default, orderings: balanced, threshold: 0.5}

``config`` (all optional): ``url`` (else $LOGITJUDGE_URL, else http://127.0.0.1:8000), ``api_key`` (else
$LOGITJUDGE_API_KEY), ``rubric`` (a built-in name or an inline rubric), ``orderings``, ``criterion`` (the one whose
score passes or fails; default the rubric's first), ``context_var`` (the test variable shown as the text's context;
default ``question`` where the test has it) and ``threshold`` on the score. ``score`` is the order-averaged expected
score rescaled to [0, 1] over the criterion's values (min -> 0, max -> 1); ``namedScores`` holds the criterion's
expected and PriDe-debiased scores on the rubric's own scale, the hold probability of its top label and the label
mass. Standard library only (urllib): promptfoo runs this file in the Python it finds, which need not hold
logitjudge.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8000"


def _post(url: str, body: dict, api_key: str | None, timeout: float) -> dict:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url.rstrip("/") + "/v1/judge", json.dumps(body).encode(), headers, method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - the configured service's URL
        return json.loads(r.read())


def refusal(e: urllib.error.HTTPError) -> str:
    """The service's one-line message of a refusal (its JSON error), else the HTTP reason."""
    try:
        return json.loads(e.read())["error"]["message"]
    except Exception:  # noqa: BLE001 - not the service's JSON error: say the status
        return e.reason


def _fail(reason: str) -> dict:
    return {"pass": False, "score": 0.0, "reason": reason}


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def get_assert(output, context) -> dict:
    """promptfoo's entry (module doc)."""
    config = dict((context or {}).get("config") or {})
    variables = (context or {}).get("vars") or {}
    url = config.get("url") or os.environ.get("LOGITJUDGE_URL") or DEFAULT_URL
    shown = variables.get(config.get("context_var", "question"))
    item = {"id": "output", "text": str(output)}
    if shown is not None:
        item["context"] = str(shown)
    body = {"rubric": config.get("rubric", "default"), "orderings": config.get("orderings", "balanced"),
            "items": [item]}
    try:
        answer = _post(url, body, config.get("api_key") or os.environ.get("LOGITJUDGE_API_KEY"),
                       float(config.get("timeout", 600)))
    except urllib.error.HTTPError as e:
        return _fail(f"logitjudge serve at {url} refused the output ({e.code}): {refusal(e)}")
    except (urllib.error.URLError, OSError) as e:
        return _fail(f"logitjudge serve at {url} could not be reached ({e}); start it with logitjudge serve")
    return grading_result(answer, config)


def grading_result(answer: dict, config: dict) -> dict:
    """promptfoo's GradingResult from a one-item /v1/judge answer."""
    crits = answer["items"][0]["criteria"]
    name = config.get("criterion") or crits[0]["criterion"]
    c = next((x for x in crits if x["criterion"] == name), None)
    if c is None:
        return _fail(f"config criterion {name!r} is not in the rubric; use one of {[x['criterion'] for x in crits]}")
    low, high = min(c["values"]), max(c["values"])
    score = (c["expected"] - low) / (high - low) if high > low else 1.0
    threshold = float(config.get("threshold", 0.5))
    bias = answer["bias"].get(name) or {}
    tested = (f"position test p = {_fmt(bias.get('p_value'))} ({bias.get('reading')})" if bias.get("tested")
              else f"position bias not tested on one item ({bias.get('reason', 'n/a')})")
    reason = (f"{name}: expected score {c['expected']:.4g} on {_fmt(low)}..{_fmt(high)} (order-averaged over "
              f"{answer['n_orders']} {answer['orderings']} orders), PriDe-debiased {_fmt(c['debiased'])}; top label "
              f"{c['top_label']!r} holds under a random order with probability {_fmt(c['hold'])}; label mass "
              f"{_fmt(c['label_mass'])}; {tested}; score {score:.4g} vs threshold {threshold:g}")
    named = {f"{name}_{k}": c[k] for k in ("expected", "debiased", "hold", "label_mass") if c[k] is not None}
    return {"pass": score >= threshold, "score": score, "reason": reason, "namedScores": named,
            "metadata": {"logitjudge": {"model": answer["model"], "criterion": c, "bias": bias,
                                        "readings": answer["readings"]}}}
