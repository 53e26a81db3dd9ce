"""``logitjudge probe``: lens, attention, patching and linear probes on the permuted prompts -> probe.npz (+ a
report page with ``--report DIR``). Registered by the main CLI with :func:`add_parser` and :func:`cmd_probe`."""

from __future__ import annotations

import argparse


def add_parser(command) -> argparse.ArgumentParser:
    """The ``probe`` subcommand, made by the CLI's ``command(name, help)`` (common flags, help format)."""
    p = command("probe", "where position bias comes from inside the judge: logit lens, attention to option lines, "
                         "order-swap patching, linear probes")
    p.add_argument("--model", default="gemma-3-270m", help="HF model id, local folder, or gemma-3-270m")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--rubric", default=None, help="rubric .toml/.json file or built-in name (default: the "
                                                  "data set's rubric with --dataset, else 'default')")
    p.add_argument("--criterion", default=None, help="criterion name to probe (default: the first)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--texts", help="JSONL with id, text and optional context")
    src.add_argument("--dataset", help="a data set of logitjudge.data (hanna, summeval, mt_bench, vicuna_bench)")
    p.add_argument("--limit", type=int, default=None, help="with --dataset: at most this many items (whole "
                                                           "groups, chosen with --seed)")
    p.add_argument("--data-dir", default=None, help="with --dataset: the data folder ($LOGITJUDGE_DATA)")
    p.add_argument("--orderings", default="balanced", help="balanced | random:K")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--template", default=None, help="built-in template name or .toml file")
    p.add_argument("--probes", default="lens,attention,patch,linear", help="comma-separated subset")
    p.add_argument("--pairs", default="reverse", choices=["reverse", "canonical", "all"],
                   help="patching pairs: from the reversed ordering / from ordering 0 / every ordered pair")
    p.add_argument("--sites", default="resid,attn,mlp,head", help="patch sites: resid,attn,mlp,head")
    p.add_argument("--layers", default=None, help="layers exported for linear probes (comma list; default all)")
    p.add_argument("--forward", default="auto", choices=["auto", "shared", "copy"],
                   help="how patch rows continue the cached prefix (auto: shared where supported)")
    p.add_argument("--max-rows", type=int, default=256, help="patch rows per forward call")
    p.add_argument("--out", required=True, help="output probe table .npz (resumes if interrupted)")
    p.add_argument("--report", default=None, help="also write the probe report page into this folder")
    p.add_argument("--n-boot", type=int, default=1000)
    p.add_argument("--quiet", action="store_true")
    return p


def cmd_probe(args) -> int:
    from ..items import read_items
    from ..models import load_model, set_threads
    from ..orderings import parse
    from ..prompts import load_template
    from ..rubric import load_rubric
    from .hooks import ProbeError
    from .run import check_probe_args, probe

    if args.dataset:
        from ..data import load_dataset

        ds = load_dataset(args.dataset, args.data_dir, limit=args.limit, seed=args.seed)
        items = ds.items
        rubric = load_rubric(args.rubric) if args.rubric else ds.rubric
    else:
        items = read_items(args.texts)
        rubric = load_rubric(args.rubric or "default")
    names = [c.name for c in rubric.criteria]
    if args.criterion is not None and args.criterion not in names:
        raise ProbeError(f"--criterion {args.criterion!r} is not in the rubric; choose one of {names}")
    crit = names.index(args.criterion) if args.criterion else 0
    orders = parse(args.orderings, len(rubric.criteria[crit].options), seed=args.seed)
    probes = [x.strip() for x in args.probes.split(",") if x.strip()]
    kinds = [x.strip() for x in args.sites.split(",") if x.strip()]
    check_probe_args(probes, orders, pairs=args.pairs, kinds=kinds)  # before the model loads
    template = load_template(args.template)
    layers = None if args.layers is None else [int(x) for x in args.layers.split(",")]
    set_threads(args.threads)
    lm = load_model(args.model, dtype=args.dtype, device=args.device)
    table = probe(lm, items, rubric, orders, probes=probes, template=template, criterion=crit, pairs=args.pairs,
                  kinds=kinds, hidden_layers=layers, mode=args.forward, max_rows=args.max_rows, out=args.out,
                  progress=not args.quiet)
    print(f"wrote {args.out}: {len(table.item_ids)} items x {len(orders)} orderings, probes {','.join(probes)}")
    if args.report:
        from ..report.probe import write_probe_report

        page = write_probe_report(table, args.report, n_boot=args.n_boot, rng=args.seed)
        print(f"report: {page}")
    return 0
