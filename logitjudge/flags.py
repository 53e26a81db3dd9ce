"""The command line's flags of the spec's sections, generated from their fields (:mod:`logitjudge.spec`: the one
schema behind the flags, the TOML keys and the ``lj.*`` keywords), and the spec that parsed flags make."""

from __future__ import annotations

from dataclasses import MISSING, fields

from .spec import SECTIONS, Spec, SpecError, check_value, flag_of


def add_flags(parser, cls, *, only=None, required=(), one_of=(), dest_prefix: str = "",
              defaults: bool = True, helps: dict | None = None) -> None:
    """The flags of a spec section (choices, defaults and help from the fields). ``only``: field names to add;
    ``one_of``: field names of which exactly one flag must be given; ``defaults=False``: every flag defaults to
    None (flags set over a spec file's own values; the help says so); ``helps``: {field name: help} where one
    command says it its own way. The help shows a default only where there is one (cli's formatter)."""
    group = parser.add_mutually_exclusive_group(required=True) if one_of else None
    for f in fields(cls):
        m = f.metadata
        if not m.get("cli") or (only is not None and f.name not in only):
            continue
        help = (helps or {}).get(f.name, m["help"])
        if m["kind"] == "chat":  # --chat / --no-chat (unset: the template's setting)
            both = parser.add_mutually_exclusive_group()
            both.add_argument("--chat", dest=dest_prefix + f.name, action="store_const", const=True, default=None,
                              help="prompts through the judge's chat template; unset: the template's chat setting "
                                   "(\"auto\" in every built-in: where the judge's tokenizer has one)")
            both.add_argument("--no-chat", dest=dest_prefix + f.name, action="store_const", const=False,
                              help="plain prompts, no chat template (a base model's reading)")
            continue
        if not defaults and m["kind"] != "bool":
            help += " (default: the spec's value)"
        kw: dict = {"dest": dest_prefix + f.name, "help": help}
        if m["kind"] != "bool" and not m["choices"]:
            kw["metavar"] = flag_of(f).lstrip("-").replace("-", "_").upper()
        if m["kind"] == "bool":
            kw["action"] = "store_true"
        else:
            kw["default"] = None if f.default is MISSING or not defaults else f.default
            if m["choices"]:
                kw["choices"] = list(m["choices"])
            if m["kind"] == "int":
                kw["type"] = int
        if f.name in required:
            kw["required"] = True
            kw.pop("default", None)
        (group if f.name in one_of else parser).add_argument(flag_of(f), **kw)


def from_flags(args, *, name: str = "score") -> Spec:
    """The spec of parsed flags (those :func:`add_flags` added, ``dest_prefix`` = section + '.')."""
    d = vars(args)
    sections = {}
    for key, cls in SECTIONS.items():
        given = {}
        for f in fields(cls):
            v = d.get(f"{key}.{f.name}")
            if v is None:
                continue
            if f.metadata["kind"] in ("strs", "ints") and isinstance(v, str):
                v = [x.strip() for x in v.split(",") if x.strip()]
                if f.metadata["kind"] == "ints":
                    v = [int(x) if x.lstrip("-").isdigit() else x for x in v]
            given[f.name] = check_value(f, v, flag_of(f), flag=True)
        sections[key] = cls(**given)
    top = {f.name: check_value(f, d[f.name], flag_of(f), flag=True) for f in fields(Spec)
           if f.metadata.get("cli") and d.get(f.name) is not None}
    if (sections["data"].name is None) == (sections["data"].texts is None):
        raise SpecError("give exactly one of --texts FILE (a JSONL of items) or --dataset NAME (hanna, summeval, "
                        "mt_bench, vicuna_bench)")
    return Spec(name=name, **top, **sections, from_flags=True)
