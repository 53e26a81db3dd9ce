"""The probe report page: ``probe.md``, a self-contained ``probe.html`` (plots inline), ``probe.json`` and the
PNGs, from a :class:`~logitjudge.probing.table.ProbeTable` (its arrays, read here as the sections read a
ScoreTable's, go through the pure estimators of :mod:`logitjudge.stats.probing` and :mod:`.linear_probe`).

Figures: layer x position heatmap of the lens's position effect (with the χ² per layer), layer x head heatmaps
of attention by position and by chosen content, patching curves (residual / attention / MLP by layer, heads as a
heatmap), and linear-probe accuracy by layer against the majority baseline. Positions are numbered 1..n as the
prompt lists the options; layers and heads as transformers names them (``model.layers.0`` is the first layer,
heads from 0), said once on the page (:data:`NUMBERING`).
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..stats._result import jsonable
from ..stats.linear_probe import linear_summary
from ..stats.position import probs_by_position
from ..stats.probing import attention_summary, lens_position_effect, patch_summary


def _save(fig: Figure, path: Path) -> Path:
    for ax in fig.axes:
        if ax.get_label() != "<colorbar>":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if ax.get_ylabel() == "layer":
                ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100, metadata={"Software": None})
    return path


NUMBERING = ("Positions are numbered 1..n as the prompt lists the options; layers and heads as transformers "
             "names them (model.layers.0 is the first layer, heads count from 0).")


def heatmap(ax, m, title, xlabel, ylabel, cmap="RdBu_r", center=True, fig=None, x0: int = 0):
    """``m[layer, x]`` on ``ax`` with layers upwards and a colour bar (centred on 0 when ``center``); the columns
    sit at x = ``x0``, ``x0`` + 1, ... (1 for positions, as a person counts them; 0 for heads)."""
    v = np.nanmax(np.abs(m)) if center else None
    extent = (x0 - 0.5, x0 + m.shape[1] - 0.5, -0.5, m.shape[0] - 0.5)
    im = ax.imshow(m, aspect="auto", origin="lower", cmap=cmap, vmin=-v if center else None,
                   vmax=v if center else None, interpolation="nearest", extent=extent)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    fig.colorbar(im, ax=ax, shrink=0.8)


def plot_lens(res, path: Path) -> Path:
    fig = Figure(figsize=(9, 4))
    a, b = fig.subplots(1, 2)
    heatmap(a, res.log_odds, "lens position effect (log-odds gained at each position)", "position", "layer",
            fig=fig, x0=1)
    L = len(res.pvalue)
    b.plot(np.arange(L), -np.log10(np.maximum(res.pvalue_holm, 1e-300)), "o-", color="#d62728")
    b.axhline(-np.log10(res.alpha), ls="--", color="gray", label=f"alpha = {res.alpha}")
    if res.emerges_at is not None:
        b.axvline(res.emerges_at, color="black", lw=0.8, label=f"appears at layer {res.emerges_at}")
    b.set_xlabel("layer")
    b.set_ylabel("-log10 p (χ² on lens choices, Holm over layers)")
    b.legend(fontsize=8)
    return _save(fig, path)


def plot_attention(att, path: Path) -> Path:
    fig = Figure(figsize=(9, 4))
    a, b = fig.subplots(1, 2)
    heatmap(a, att.position_index, "attention to a position: top share − 1/n (digit: the position)", "head",
            "layer", cmap="Reds", center=False, fig=fig)
    for (ly, h), p in np.ndenumerate(att.top_position_index):
        a.text(h, ly, str(p + 1), ha="center", va="center", fontsize=6)
    heatmap(b, att.follows_choice, "attention to the chosen option's line − others", "head", "layer", fig=fig)
    return _save(fig, path)


def plot_patching(pat, path: Path) -> Path:
    fig = Figure(figsize=(9, 4))
    a, b = fig.subplots(1, 2)
    lo, hi = pat.to_source_ci
    for k, name, color in ((0, "residual", "#1f77b4"), (1, "attention", "#d62728"), (2, "MLP", "#2ca02c")):
        sel = pat.kind == k
        if sel.any():
            x = pat.layer[sel]
            a.plot(x, pat.to_source[sel], "o-", color=color, label=name)
            a.fill_between(x, lo[sel], hi[sel], color=color, alpha=0.15)
    a.set_xlabel("layer")
    a.set_ylabel("moved to the source's answer (1 − TV ratio)")
    a.set_title(f"order-swap patching at the answer position ({pat.n_pairs} pairs)", fontsize=9)
    a.legend(fontsize=8)
    heads = pat.kind == 3
    if heads.any():
        m = np.full((pat.layer.max() + 1, pat.head.max() + 1), np.nan)
        m[pat.layer[heads], pat.head[heads]] = pat.to_source[heads]
        heatmap(b, m, "single heads patched", "head", "layer", fig=fig)
    else:
        b.axis("off")
    return _save(fig, path)


def plot_linear(lin, path: Path) -> Path:
    fig = Figure(figsize=(9, 4))
    axes = fig.subplots(1, 2)
    for ax, label in zip(axes, ("chosen position", "chosen option")):
        for site, color in (("answer", "#1f77b4"), ("line ends", "#9467bd")):
            rs = lin.results[(label, site)]
            acc = np.array([r.accuracy for r in rs])
            ax.errorbar(lin.layers, acc, yerr=[acc - [r.ci_low for r in rs], [r.ci_high for r in rs] - acc],
                        fmt="o-", color=color, label=f"probe at {site}", capsize=2)
        ax.plot(lin.layers, [r.chance for r in lin.results[(label, "answer")]], "--", color="gray",
                label="majority baseline")
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("layer")
        ax.set_ylabel("held-out accuracy")
        ax.set_title(f"linear probe: {label}", fontsize=9)
        ax.legend(fontsize=7)
    return _save(fig, path)


def probe_results(table, *, n_boot: int = 1000, rng=None) -> dict:
    """Every estimate the page shows, as plain objects: {section: result}. ``position_preference``: the mean
    probability of each position in the model's own output distribution (over items and orderings)."""
    rng = np.random.default_rng(rng)
    orders = table.option_orders
    out = {"position_preference": probs_by_position(table.probs, orders).mean(axis=(0, 1))}
    if table.has("lens_logprobs"):
        out["lens"] = lens_position_effect(table.lens_probs, orders, n_boot=n_boot, rng=rng)
    if table.has("attention"):
        out["attention"] = attention_summary(table.attention, orders, table.probs, n_boot=n_boot, rng=rng)
    if table.has("patched"):
        out["patch"] = patch_summary(table.clean, table.patched, table.pairs, orders, site_layer=table.site_layer,
                                     site_kind=table.site_kind, site_head=table.site_head, n_boot=n_boot, rng=rng)
    if table.has("hidden"):
        out["linear"] = linear_summary(table.hidden, table.hidden_layers, table.probs, orders, n_boot=n_boot,
                                       rng=rng)
    return out


def _headlines(res: dict, table) -> list[str]:
    lines = []
    pp = res["position_preference"]
    lines.append("Mean probability of each position 1..n (model output): " + ", ".join(f"{x:.3f}" for x in pp))
    if "lens" in res:
        r = res["lens"]
        where = "does not appear (last layer not significant)" if r.emerges_at is None else \
            f"appears at layer {r.emerges_at} (from there on the χ² on lens choices rejects uniform after Holm's " \
            f"correction, alpha {r.alpha}, and the layer carries >= {r.fraction:.0%} of the output's position effect)"
        lines.append(f"Logit lens: the position preference {where}; last layer p = {r.pvalue[-1]:.3g} (χ² with items "
                     f"as clusters), Cramér's V {r.cramers_v[-1]:.3f} (bias-corrected).")
    if "attention" in res:
        a = res["attention"]
        top = np.dstack(np.unravel_index(np.argsort(-a.position_index, axis=None)[:5], a.position_index.shape))[0]
        lines.append("Heads most concentrated on one position (layer L, head h → position, top share − 1/n): " +
                     ", ".join(f"L{ly}.h{h} → {a.top_position_index[ly, h] + 1} ({a.position_index[ly, h]:.2f})"
                               for ly, h in top))
    if "patch" in res:
        p = res["patch"]
        order = np.argsort(-p.to_source)[:5]
        lines.append("Sites that move the answer most toward the source ordering's: " +
                     ", ".join(f"{p.names[s]} {p.to_source[s]:.2f}" for s in order))
    if "linear" in res:
        lin = res["linear"]
        for label in ("chosen position", "chosen option"):
            rs = lin.results[(label, "answer")]
            best = int(np.argmax([r.accuracy for r in rs]))
            lines.append(f"Linear probe for {label} at the answer position: best layer {lin.layers[best]} "
                         f"accuracy {rs[best].accuracy:.2f} [{rs[best].ci_low:.2f}, {rs[best].ci_high:.2f}] vs "
                         f"majority {rs[best].chance:.2f}.")
    return lines


def write_probe_report(table, folder, *, n_boot: int = 1000, rng=None) -> Path:
    """Write probe.md / probe.html / probe.json and the figures into ``folder``; returns the HTML path."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    res = probe_results(table, n_boot=n_boot, rng=rng)
    figs = {}
    for name, fn in (("lens", plot_lens), ("attention", plot_attention), ("patch", plot_patching),
                     ("linear", plot_linear)):
        if name in res:
            figs[name] = fn(res[name], out / f"probe_{name}.png")
    heads = _headlines(res, table)
    title = f"Probing {table.meta.get('model_id', '?')} on {len(table.item_ids)} items x " \
            f"{len(table.option_orders)} orderings ({table.criterion})"
    md = [f"# {title}", "", NUMBERING, ""] + [f"- {x}" for x in heads] + [""]
    md += [f"![{k}]({p.name})" for k, p in figs.items()]
    (out / "probe.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    body = [f"<h1>{html.escape(title)}</h1><p>{html.escape(NUMBERING)}</p><ul>"]
    body += [f"<li>{html.escape(x)}</li>" for x in heads] + ["</ul>"]
    for k, p in figs.items():
        data = base64.b64encode(p.read_bytes()).decode()
        body.append(f'<h2>{html.escape(k)}</h2><img alt="{k}" src="data:image/png;base64,{data}">')
    page = out / "probe.html"
    page.write_text("<!doctype html><meta charset='utf-8'><title>probe</title>"
                    "<style>body{font-family:sans-serif;max-width:60em;margin:auto}img{max-width:100%}</style>"
                    + "".join(body), encoding="utf-8")
    (out / "probe.json").write_text(json.dumps(jsonable(_plain(res)), indent=1, default=str), encoding="utf-8")
    return page


def _plain(res: dict) -> dict:
    def conv(x):
        if hasattr(x, "__dataclass_fields__"):
            return {k: conv(getattr(x, k)) for k in x.__dataclass_fields__}
        if isinstance(x, dict):
            return {" / ".join(k) if isinstance(k, tuple) else k: conv(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [conv(v) for v in x]
        return x
    return {k: conv(v) for k, v in res.items()}
