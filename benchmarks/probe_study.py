"""Where the built-in judge's position preference comes from, on real HANNA stories: the layer at which it
appears (logit lens), the heads that carry it (order-swap patching of single heads, cross-checked with attention
to option positions), and where the chosen position / option is linearly decodable (probes).

The run is the library's own probe path: a ``logitjudge run`` spec with a ``[probe]`` section (``experiment.
prepare`` loads HANNA, ``probe_experiment`` runs a :class:`logitjudge.probing.run.ProbeRun`, resumable, and writes the
probe page with :func:`logitjudge.report.probe.write_probe_report`); this script reads the page's ``probe.json``,
prints the study's tables and draws one compact figure. Stories: ``--stories N`` WritingPrompts prompts drawn with
``--seed``, one story of each (its system drawn with the seed), criterion ``--criterion`` (Coherence), the HANNA
rubric (1-5), balanced orderings (n = 5 -> 10 orderings), the built-in template, gemma-3-270m fp32 on CPU.

Definitions (every number printed names one of them):

* Logit lens: each layer's residual stream at the answer position (the last prompt token) read with the model's
  own final norm, unembedding and soft-cap, full-vocabulary log-softmax in fp32, then renormalised over the five
  labels; a multi-token label's lens log-probability is the sum over its tokens, each read at the position that
  predicts it with the earlier label tokens run through the full model (teacher forcing; the script prints how
  many tokens each label has). Per layer: ``log-odds[p]`` = the log-probability an option gains at position p
  over its average elsewhere (``stats.fit_position_effect``), the χ² of the lens's argmax positions against
  uniform (``stats.position_chisquare``), Holm-adjusted over the layers, and ``share`` = the projection of the
  layer's log-odds vector on the last layer's, ``<lo_l, lo_last> / |lo_last|^2`` (1: the output's preference in
  full). **The layer at which the position preference appears** (``stats.preference_onset``): the first layer from
  which every later layer has a Holm-adjusted p < 0.05 AND share >= 0.5 (``--fraction``); none when the output
  itself shows no significant preference.
* The heads that carry it: each head's output (its slice of the attention output projection's input) at the
  answer position is patched from the ordering that lists the options in reverse into each ordering (10 pairs per
  story). ``drop`` = P_target(the option the target shows at the model's preferred position) minus the same after
  the patch; the preferred position is the one with the largest mean output probability over all stories and
  orderings. Mean over stories and pairs, percentile bootstrap CI over stories. **The heads that carry it**: the
  heads whose drop CI lies above 0, largest drop first. Cross-check: each head's attention from the answer query
  to the option lines, by position (mean over stories and orderings); ``index`` = the largest position share of
  the head's option-line mass minus 1/5, CI over stories, and its rank among all heads; and the Spearman
  correlation over heads of drop and index.
* Linear probes: the residual stream after each layer at the answer position ('answer') and at the five option
  line ends concatenated by position ('line ends'), L2 multinomial logistic regression, 5-fold cross-validation
  holding out whole stories; labels 'chosen position' (the position of the option the model ranks first) and
  'chosen option' (its canonical score); accuracy against the majority baseline of the same folds, bootstrap CIs
  over stories.

Prints Markdown tables, writes ``benchmarks/results/probe_study.json`` (``--json``), the probe table and page in
``benchmarks/results/probe_study/`` (``--out``; an interrupted run continues there) and the figure
``docs/figures/probe_hanna.png`` (``--figure``).

    OMP_NUM_THREADS=2 .venv/bin/python -m benchmarks.probe_study --stories 16 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PROBES = "lens,attention,patch,linear"


def study_spec(args) -> dict:
    """The ``logitjudge run`` spec of the study (HANNA, one criterion, balanced orders, every probe)."""
    return {"name": "probe-study-hanna", "out": args.out,
            "model": {"id": args.model, "dtype": "fp32", "device": "cpu", "threads": args.threads},
            "data": {"name": "hanna", "groups": args.stories, "seed": args.seed, "criteria": [args.criterion]},
            "orderings": {"options": "balanced", "seed": args.seed},
            "analysis": {"n_boot": args.n_boot, "seed": args.seed},
            "probe": {"probes": args.probes.split(","), "criterion": args.criterion, "pairs": "reverse",
                      "sites": args.sites.split(",")}}


def one_story_per_prompt(items, seed: int) -> list:
    """One story of each WritingPrompts prompt (group), its system drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    groups: dict[str, list] = {}
    for it in items:
        groups.setdefault(it.group, []).append(it)
    return [g[int(rng.integers(len(g)))] for g in groups.values()]


def prompt_facts(lm, exp) -> tuple[dict, list[int]]:
    """How many tokens each label of the probed criterion has (in the prompt's continuation), and the prompt
    lengths of the first story's orderings."""
    from logitjudge.probing.prompts import probe_prompts

    pps = probe_prompts(lm, exp.rubric, exp.items[0], exp.option_orders, exp.template)
    labels = [o.label for o in exp.rubric.criteria[0].options]
    return {lab: len(ids) for lab, ids in zip(labels, pps[0].encoded.continuation_ids)}, [len(p.ids) for p in pps]


# ---- the study's numbers from the probe page's results -------------------------------------------------------
def lens_rows(lens: dict) -> list[dict]:
    return [{"layer": layer, "log_odds": lens["log_odds"][layer], "p_holm": lens["pvalue_holm"][layer],
             "cramers_v": lens["cramers_v"][layer], "share": lens["share_of_final"][layer]}
            for layer in range(len(lens["pvalue"]))]


def head_rows(patch: dict, att: dict, top: int) -> tuple[list[dict], dict]:
    """The heads ranked by their patching drop, each with its attention to positions; and the cross-check."""
    from logitjudge import stats as st

    kind = np.array(patch["kind"])
    heads = np.flatnonzero(kind == 3)
    layer, head = np.array(patch["layer"])[heads], np.array(patch["head"])[heads]
    drop = np.array(patch["preference_drop"], dtype=float)[heads]
    lo, hi = (np.array(x, dtype=float)[heads] for x in patch["preference_drop_ci"])
    index = np.array(att["position_index"], dtype=float)[layer, head]
    ilo, ihi = (np.array(x, dtype=float)[layer, head] for x in att["position_index_ci"])
    top_pos = np.array(att["top_position_index"])[layer, head] + 1  # positions 1..n, as a person counts them
    att_rank = np.empty(len(heads), int)
    att_rank[np.argsort(-index, kind="stable")] = np.arange(1, len(heads) + 1)
    order = np.argsort(-drop, kind="stable")
    rows = [{"head": f"L{layer[i]}.h{head[i]}", "drop": drop[i], "drop_ci": [lo[i], hi[i]],
             "carries": bool(lo[i] > 0), "to_source": np.array(patch["to_source"], dtype=float)[heads][i],
             "follows_position": np.array(patch["follows_position"], dtype=float)[heads][i],
             "attention_top_position": int(top_pos[i]), "attention_index": index[i],
             "attention_index_ci": [ilo[i], ihi[i]], "attention_rank": int(att_rank[i])} for i in order[:top]]
    carriers = [f"L{layer[i]}.h{head[i]}" for i in order if lo[i] > 0]
    by_att = [f"L{layer[i]}.h{head[i]}" for i in np.argsort(-index, kind="stable")[:top]]
    check = {"carrying_heads": carriers, "top_attention_heads": by_att,
             "overlap_top": sorted(set(by_att) & {r["head"] for r in rows}), "n_heads": int(len(heads))}
    if len(heads) >= 3 and np.ptp(drop) > 0 and np.ptp(index) > 0:
        r = st.correlation(drop, index, method="spearman", n_boot=0)
        check["spearman_drop_vs_index"] = {"r": r.statistic, "p": r.pvalue}
    return rows, check


def linear_rows(linear: dict) -> list[dict]:
    res = linear["results"]
    rows = []
    for i, layer in enumerate(linear["layers"]):
        row = {"layer": layer}
        for label in ("chosen position", "chosen option"):
            for site in ("answer", "line ends"):
                r = res[f"{label} / {site}"][i]
                row[f"{label} / {site}"] = {k: r[k] for k in ("accuracy", "ci_low", "ci_high", "chance",
                                                               "chance_ci_low", "chance_ci_high")}
        rows.append(row)
    return rows


# ---- printing ----------------------------------------------------------------------------------------------
def _f(x, d=2) -> str:
    return "n/a" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{d}f}"


def _ci(lo, hi, d=2) -> str:
    return f"[{_f(lo, d)}, {_f(hi, d)}]"


def print_tables(out: dict) -> None:
    lens, heads, check, lin = out.get("lens"), out.get("heads"), out.get("head_check"), out.get("linear")
    if lens:
        print(f"\n## Logit lens ({out['label_reading']})\n")
        print("| layer | log-odds by position (1..5) | χ² p (Holm) | Cramér's V | share of the output's effect |")
        print("|---:|---|---:|---:|---:|")
        for r in lens["rows"]:
            print(f"| {r['layer']} | {' '.join(f'{x:+.2f}' for x in r['log_odds'])} | {r['p_holm']:.1e} | "
                  f"{_f(r['cramers_v'], 3)} | {_f(r['share'])} |")
        at = lens["emerges_at"]
        print(f"\nThe position preference appears at layer **{at}** (first layer from which every later layer has "
              f"Holm p < {lens['alpha']} and share >= {lens['fraction']})." if at is not None else
              "\nThe position preference does not appear: the output's χ² is not significant after Holm.")
    if heads:
        print(f"\n## Heads (patched from the reversed ordering; preferred position {out['preferred_position']})\n")
        print("| head | drop of P(preferred position) [95% CI] | carries | to source | follows position | "
              "attention: top position, index [95% CI] (rank) |")
        print("|---|---|:-:|---:|---:|---|")
        for r in heads:
            print(f"| {r['head']} | {_f(r['drop'], 3)} {_ci(*r['drop_ci'], 3)} | {'yes' if r['carries'] else ''} | "
                  f"{_f(r['to_source'])} | {_f(r['follows_position'])} | {r['attention_top_position']}, "
                  f"{_f(r['attention_index'])} {_ci(*r['attention_index_ci'])} ({r['attention_rank']}) |")
        sp = check.get("spearman_drop_vs_index")
        print(f"\nHeads that carry it (drop CI above 0): {', '.join(check['carrying_heads']) or 'none'}; "
              f"top heads by attention to one position: {', '.join(check['top_attention_heads'])}; in both top "
              f"lists: {', '.join(check['overlap_top']) or 'none'}"
              + (f"; Spearman(drop, attention index) over {check['n_heads']} heads = {sp['r']:.2f} "
                 f"(p {sp['p']:.2g})." if sp else "."))
    if lin:
        print("\n## Linear probes (held-out accuracy [95% CI] vs majority baseline)\n")
        cols = [(lab, site) for lab in ("chosen position", "chosen option") for site in ("answer", "line ends")]
        print("| layer | " + " | ".join(f"{lab} @ {site}" for lab, site in cols) + " |")
        print("|---:|" + "---|" * len(cols))
        for r in lin:
            cells = [r[f"{lab} / {site}"] for lab, site in cols]
            print(f"| {r['layer']} | " + " | ".join(
                f"{_f(c['accuracy'])} {_ci(c['ci_low'], c['ci_high'])} vs {_f(c['chance'])}" for c in cells) + " |")


# ---- the figure --------------------------------------------------------------------------------------------
def draw(out: dict, res: dict, path: Path) -> Path:
    from matplotlib.figure import Figure

    from logitjudge.report.probe import NUMBERING, heatmap

    fig = Figure(figsize=(12, 6.4))
    axes = fig.subplots(2, 3)
    a = axes[0, 0]
    lens = res.get("lens")
    if lens:
        lo = np.array(lens["log_odds"], dtype=float)
        heatmap(a, lo, "lens: log-odds gained at each position", "position", "layer", fig=fig, x0=1)
        a.set_xticks(range(1, lo.shape[1] + 1))
        if lens["emerges_at"] is not None:
            a.axhline(lens["emerges_at"] - 0.5, color="black", lw=1)
        b = axes[0, 1]
        L = len(lo)
        b.plot(range(L), lens["share_of_final"], "o-", color="#1f77b4", label="share of the output's effect")
        b.axhline(lens["fraction"], ls=":", color="#1f77b4")
        b2 = b.twinx()
        b2.plot(range(L), -np.log10(np.maximum(np.array(lens["pvalue_holm"], dtype=float), 1e-300)), "s-",
                color="#d62728", ms=3, label="-log10 p (χ², Holm)")
        b2.axhline(-np.log10(lens["alpha"]), ls="--", color="#d62728", lw=0.8)
        if lens["emerges_at"] is not None:
            b.axvline(lens["emerges_at"], color="black", lw=1)
        b.set_title("lens: the preference " + ("does not appear" if lens["emerges_at"] is None else
                                               f"appears at layer {lens['emerges_at']}"), fontsize=9)
        b.set_xlabel("layer")
        b.legend(fontsize=7, loc="upper left")
        b2.legend(fontsize=7, loc="lower right")
    else:
        a.axis("off")
        axes[0, 1].axis("off")
    patch, att = res.get("patch"), res.get("attention")
    c = axes[0, 2]
    if patch:
        kind = np.array(patch["kind"])
        drop = np.array(patch["preference_drop"], dtype=float)
        lo, hi = (np.array(x, dtype=float) for x in patch["preference_drop_ci"])
        for k, name, color in ((0, "residual", "#1f77b4"), (1, "attention", "#d62728"), (2, "MLP", "#2ca02c")):
            sel = kind == k
            if sel.any():
                x = np.array(patch["layer"])[sel]
                c.plot(x, drop[sel], "o-", ms=3, color=color, label=name)
                c.fill_between(x, lo[sel], hi[sel], color=color, alpha=0.15)
        c.axhline(0, color="gray", lw=0.6)
        c.set_title("patched from the reversed order:\ndrop of P(preferred position), CI over stories", fontsize=9)
        c.set_xlabel("layer")
        c.legend(fontsize=7)
        heads = kind == 3
        d = axes[1, 0]
        if heads.any():
            ly, hd = np.array(patch["layer"])[heads], np.array(patch["head"])[heads]
            m = np.full((ly.max() + 1, hd.max() + 1), np.nan)
            m[ly, hd] = drop[heads]
            heatmap(d, m, "single heads: drop (* CI above 0)", "head", "layer", fig=fig)
            for i in np.flatnonzero(heads):
                if lo[i] > 0:
                    d.text(patch["head"][i], patch["layer"][i], "*", ha="center", va="center", fontsize=9)
            d.set_xticks(range(m.shape[1]))
        else:
            d.axis("off")
    else:
        c.axis("off")
        axes[1, 0].axis("off")
    e = axes[1, 1]
    if att:
        idx = np.array(att["position_index"], dtype=float)
        heatmap(e, idx, "attention to one position:\ntop share − 1/5 (digit: the position)", "head", "layer",
                cmap="Reds", center=False, fig=fig)
        for (ly, h), p in np.ndenumerate(np.array(att["top_position_index"])):
            e.text(h, ly, str(p + 1), ha="center", va="center", fontsize=6)
        e.set_xticks(range(idx.shape[1]))
    else:
        e.axis("off")
    f = axes[1, 2]
    lin = res.get("linear")
    if lin:
        layers = np.array(lin["layers"])
        for label, color in (("chosen position", "#9467bd"), ("chosen option", "#ff7f0e")):
            rs = lin["results"][f"{label} / answer"]
            acc, lo, hi = (np.array([r[k] for r in rs], dtype=float) for k in ("accuracy", "ci_low", "ci_high"))
            f.errorbar(layers, acc, yerr=[acc - lo, hi - acc],
                       fmt="o-", ms=3, color=color, capsize=2, label=f"{label} (answer position)")
            f.plot(layers, [r["chance"] for r in rs], "--", color=color, lw=0.8)
        f.set_ylim(0, 1.05)
        f.set_title("linear probes (dashed: majority baseline)", fontsize=9)
        f.set_xlabel("layer")
        f.set_ylabel("held-out accuracy")
        f.legend(fontsize=7)
    else:
        f.axis("off")
    fig.suptitle(out["title"], fontsize=10)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.text(0.5, 0.005, NUMBERING, ha="center", va="bottom", fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=80, metadata={"Software": None})
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stories", type=int, default=16, help="WritingPrompts prompts drawn, one story each (>= 2)")
    ap.add_argument("--criterion", default="Coherence", help="HANNA criterion probed")
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--probes", default=PROBES)
    ap.add_argument("--sites", default="resid,attn,mlp,head", help="patch sites")
    ap.add_argument("--fraction", type=float, default=0.5, help="share of the output's effect for the onset")
    ap.add_argument("--top", type=int, default=8, help="heads listed")
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--data-dir", default=None,
                    help="data folder (default: $LOGITJUDGE_DATA, else ../shared/data, as every data loader)")
    ap.add_argument("--out", default="benchmarks/results/probe_study", help="probe table + page folder")
    ap.add_argument("--json", default="benchmarks/results/probe_study.json")
    ap.add_argument("--figure", default="docs/figures/probe_hanna.png")
    args = ap.parse_args(argv)
    if args.stories < 2:
        ap.error("--stories must be at least 2 (CIs and held-out probes resample stories)")

    import torch
    from logitjudge_kernels._cbuild import cpu_model

    from logitjudge import stats as st
    from logitjudge.design import prepare
    from logitjudge.experiment import SpecError, open_experiment

    t0 = time.perf_counter()
    try:  # every setting is checked before the model loads; the study's items are one story per prompt
        items = one_story_per_prompt(prepare(study_spec(args), data_dir=args.data_dir).items, args.seed)
        opened = open_experiment(study_spec(args), data_dir=args.data_dir, items=items)
    except SpecError as e:
        ap.error(str(e))
    exp, lm = opened.exp, opened.judge()
    t_load = time.perf_counter() - t0
    tokens, prompt_tokens = prompt_facts(lm, exp)
    multi = {k: v for k, v in tokens.items() if v > 1}
    reading = ("every label is one token: each layer's lens is read at the answer position" if not multi else
               f"multi-token labels {multi}: teacher-forced sum over the label's tokens")
    load_before = os.getloadavg()
    t1 = time.perf_counter()
    table, page = opened.probe(progress=True)
    t_probe = time.perf_counter() - t1
    res = json.loads((page.parent / "probe.json").read_text())
    title = (f"{args.model} on HANNA {args.criterion}: {len(exp.items)} stories x {len(exp.option_orders)} "
             "balanced orderings (CIs over stories)")
    out = {"title": title, "model": args.model, "criterion": args.criterion, "stories": [it.id for it in exp.items],
           "systems": [it.meta.get("model") for it in exp.items], "orderings": len(exp.option_orders),
           "label_tokens": tokens, "label_reading": reading, "prompt_tokens_first_story": prompt_tokens,
           "position_preference": res["position_preference"], "probes": args.probes, "sites": args.sites,
           "n_boot": args.n_boot, "seed": args.seed, "threads": torch.get_num_threads(),
           "seconds": {"load": t_load, "probe_and_page": t_probe, "probe_run": table.meta["timings"]["probe_seconds"]},
           "cpu": cpu_model(), "load_average": {"before": load_before, "after": os.getloadavg()}}
    if "lens" in res:
        lens = res["lens"]
        onset = st.preference_onset(lens["pvalue"], lens["share_of_final"], alpha=lens["alpha"],
                                    fraction=args.fraction)
        out["lens"] = {"rows": lens_rows(lens), "emerges_at": onset, "alpha": lens["alpha"],
                       "fraction": args.fraction}
        lens["emerges_at"], lens["fraction"] = onset, args.fraction
    if "patch" in res and "attention" in res:
        out["preferred_position"] = res["patch"]["preferred_position_index"] + 1  # 1..n
        out["heads"], out["head_check"] = head_rows(res["patch"], res["attention"], args.top)
    if "linear" in res:
        out["linear"] = linear_rows(res["linear"])
    print(f"# {title}; {cpu_model()}, threads {out['threads']}, load average {load_before[0]:.2f} before")
    print(f"# mean output probability by position: {' '.join(f'{x:.3f}' for x in res['position_preference'])}; "
          f"load {t_load:.0f} s, probe run + page {t_probe:.0f} s")
    print_tables(out)
    fig = draw(out, res, ROOT / args.figure if not Path(args.figure).is_absolute() else Path(args.figure))
    print(f"\nfigure: {fig} ({fig.stat().st_size / 1024:.0f} KB); page: {page}")
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(st.jsonable(out), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
