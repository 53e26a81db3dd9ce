"""Prompt templates and the exact token boundary between a prompt and each option's label continuation.

A template renders instructions, an optional context, the judged text and the rubric (options listed in a given
order), then a forced answer prefix such as ``Score: ``. The probability of an option is the probability of its
whole continuation (label + terminator), so the boundary is found the lm-evaluation-harness way: tokenize
prompt + continuation together and split, here at the last token that ends inside the prompt for every label.
"""

from __future__ import annotations

import string
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from .candidates import LETTERS, PARADIGMS, POINTWISE
from .errors import LogitJudgeError
from .rubric import Criterion, Rubric
from .tokens import convention, first_tokens
from .tomlfile import read_toml


class PromptError(LogitJudgeError, ValueError):
    pass


TEMPLATE_DIR = Path(__file__).parent / "templates"


@dataclass(frozen=True)
class Template:
    """How one prompt is laid out. ``body`` placeholders: {instructions} {context_block} {text} {rubric}.

    ``criterion_block`` placeholders: {name} {description} {options}; ``option_line``: {label} {description}
    {position} (1-based). ``answer_prefix`` placeholders: {name}. Multi-criteria prompts use ``slot_line``
    ({name}) as the forced prefix of each answer line, joined by ``slot_separator``.

    ``paradigm``: the prompts a template lays out: ``pointwise`` (a text scored on the rubric) or ``pairwise`` /
    ``listwise`` (candidates compared, :mod:`logitjudge.candidates`): there the options are the candidates, so
    ``{rubric}`` lists them through ``criterion_block`` ({name}, {description}: the criterion's; {options}) and
    ``option_line`` ({label}: the letter of the slot, "A" shown first; {description}: the candidate's text),
    ``{context_block}`` shows the group's context, and the body needs no ``{text}``. ``tie_label`` (pairwise
    only): one more answer, never permuted and not listed as a candidate ("" = none).
    """

    name: str = "text-first"
    body: str = ("{instructions}\n\n{context_block}Text:\n{text}\n\n{rubric}\n\n"
                 "Answer with the label of the option that fits best.")
    context_block: str = "Context:\n{context}\n\n"
    criterion_block: str = "{name}: {description}\n{options}"
    option_line: str = "{label}. {description}"
    criteria_separator: str = "\n\n"
    answer_prefix: str = "\n{name} score: "
    terminator: str = ""
    slot_line: str = "{name}: "
    slot_separator: str = "\n"
    chat: bool | str = "auto"  # wrap the body in the tokenizer's chat template: "auto" where it has one (uses_chat)
    needs_descriptions: bool = True
    paradigm: str = "pointwise"  # pointwise | pairwise | listwise (logitjudge.candidates)
    tie_label: str = ""  # pairwise templates: the answer for a tie ("" = no tie label)

    @property
    def shows_descriptions(self) -> bool:
        """A pointwise template's prompts show the rubric's descriptions, so an empty one is refused (checked when
        the spec is prepared, before the model loads; the run again)."""
        return self.needs_descriptions and "{description}" in self.option_line

    @classmethod
    def load(cls, path: str | Path) -> Template:
        """A template file: every key of :data:`LAYOUT` set, or ``base = "<built-in>"`` and the keys it changes
        (a file that sets only ``option_line`` would otherwise take the rest of its prompt from text-first
        without saying so); ``terminator``, ``chat`` and ``needs_descriptions`` are optional (nothing after the
        label; "auto": the judge's chat template where its tokenizer has one; descriptions checked where shown)."""
        p = Path(path)
        d = read_toml(p, what="template file", error=PromptError)
        known = set(cls.__dataclass_fields__) | {"base"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise PromptError(f"template file {p}: unknown keys {unknown}; known keys are {sorted(known)}")
        for key, value in d.items():
            want = bool if key in ("chat", "needs_descriptions") else str
            if key == "chat" and not (value == "auto" or isinstance(value, bool)):
                raise PromptError(f"template file {p}: 'chat' must be \"auto\", true or false, got {value!r:.40}")
            if not isinstance(value, want) and key != "chat":
                kind = "true or false" if want is bool else "a string"
                raise PromptError(f"template file {p}: '{key}' must be {kind}, got {type(value).__name__} "
                                  f"({value!r:.40})")
        base = d.pop("base", None)
        paradigm = d.get("paradigm", "pointwise")
        if base is not None:
            fields = {**asdict(builtin_template(base)), "name": p.stem, **d}
        else:
            layout = LAYOUT if paradigm == "pointwise" else CANDIDATE_LAYOUT
            missing = [k for k in layout if k not in d]
            if missing:
                raise PromptError(
                    f"template file {p}: missing keys {missing}; a template file sets every key that lays out the "
                    f"prompt ({', '.join(layout)}), or names the built-in template it changes, e.g. "
                    f'base = "text-first" (built-ins: {", ".join(builtin_names())})')
            fields = {"name": p.stem, **d}
        t = cls(**fields)
        for key, allowed in PLACEHOLDERS.items():
            problem = _placeholder_problem(getattr(t, key), allowed)
            if problem:
                raise PromptError(f"template file {p}: '{key}' {problem}")
        needs = (("body", "{text}"), ("body", "{rubric}"), ("option_line", "{label}"))
        if t.paradigm != "pointwise":  # candidates are the options: their text is each option's {description}
            needs = (("body", "{rubric}"), ("option_line", "{label}"), ("option_line", "{description}"))
        for key, need in needs:
            if need not in getattr(t, key):
                raise PromptError(f"template file {p}: '{key}' must contain {need}")
        t.check_paradigm(str(p))
        return t

    def check_paradigm(self, where: str) -> None:
        """The ``paradigm`` and ``tie_label`` fields (class doc)."""
        if self.paradigm not in PARADIGMS:
            raise PromptError(f"template {where}: paradigm {self.paradigm!r} is not one of {list(PARADIGMS)}")
        tie = self.tie_label
        if tie and self.paradigm != "pairwise":
            raise PromptError(f"template {where}: tie_label applies to pairwise templates only; remove it")
        if tie and (tie != tie.strip() or tie in LETTERS[:2]):
            raise PromptError(f"template {where}: tie_label {tie!r} must differ from the slot letters A and B and "
                              "have no surrounding whitespace (e.g. tie_label = \"C\")")

    def require(self, paradigm: str) -> Template:
        """This template, if it lays out ``paradigm`` prompts (a rubric template cannot lay out candidates, nor a
        candidate template a rubric); else a PromptError naming both ways out."""
        if self.paradigm != paradigm:
            builtin = {"pointwise": "'text-first', 'rubric-first' or 'bracketed'",
                       "pairwise": "'pairwise' or 'pairwise-tie'", "listwise": "'listwise'"}[paradigm]
            raise PromptError(f"template {self.name!r} lays out {self.paradigm} prompts, not {paradigm} ones: use a "
                              f"{paradigm} template (built-in {builtin}), or paradigm = \"{self.paradigm}\" "
                              f"(--paradigm {self.paradigm}) for this one")
        return self

    # ---- rendering -----------------------------------------------------------------------------------------
    def render_criterion(self, criterion: Criterion, option_order) -> str:
        lines = [self.option_line.format(label=criterion.options[o].label,
                                         description=criterion.options[o].description, position=p + 1)
                 for p, o in enumerate(option_order)]
        return self.criterion_block.format(name=criterion.name, description=criterion.description,
                                           options="\n".join(lines))

    def render_body(self, rubric: Rubric, text: str, context: str, option_order, criterion_order=None) -> str:
        crit_idx = list(range(rubric.n_criteria)) if criterion_order is None else list(criterion_order)
        blocks = [self.render_criterion(rubric.criteria[c], option_order) for c in crit_idx]
        context_block = self.context_block.format(context=context) if context else ""
        return self.body.format(instructions=rubric.instructions, context_block=context_block, text=text,
                                rubric=self.criteria_separator.join(blocks)).strip("\n")

    def continuation(self, label: str) -> str:
        return label + self.terminator


# The keys that lay out a prompt: a template file sets all of them or names a base (Template.load).
LAYOUT = ("body", "context_block", "criterion_block", "option_line", "criteria_separator", "answer_prefix",
          "slot_line", "slot_separator")
# A pairwise or listwise template lays out one criterion and no answer slots (multi-criteria is refused there).
CANDIDATE_LAYOUT = ("body", "context_block", "criterion_block", "option_line", "answer_prefix")
# The placeholders each key may use (render_body, render_criterion, requests.render); {{ }} for a literal brace.
PLACEHOLDERS = {"body": ("instructions", "context_block", "text", "rubric"), "context_block": ("context",),
                "criterion_block": ("name", "description", "options"),
                "option_line": ("label", "description", "position"), "criteria_separator": (),
                "answer_prefix": ("name",), "slot_line": ("name",), "slot_separator": (), "terminator": ()}


def _placeholder_problem(text: str, allowed) -> str | None:
    """Why ``text`` would fail (or render wrong) under ``str.format`` with the ``allowed`` names."""
    try:
        names = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
    except ValueError as e:
        return f"is not a valid format string ({e}); write {{{{ and }}}} for literal braces"
    for f in names:
        if f.split(".")[0].split("[")[0] not in allowed:
            return (f"uses the placeholder {{{f}}}, which is not one of "
                    f"{', '.join('{' + a + '}' for a in allowed) or 'none'}; write {{{{ and }}}} for literal braces")
    return None


def builtin_names() -> list[str]:
    return sorted(x.stem for x in TEMPLATE_DIR.glob("*.toml"))


def builtin_template(name: str) -> Template:
    p = TEMPLATE_DIR / f"{name}.toml"
    if not p.exists():
        raise PromptError(f"no built-in template {name!r}; available: {builtin_names()}, or pass a .toml file")
    return Template.load(p)


def default_template(multi: bool, paradigm: str = POINTWISE) -> str:
    """The built-in template a run uses when none is given (pairwise and listwise: the template of that name)."""
    if paradigm != POINTWISE:
        return paradigm
    return "multi-criteria" if multi else "text-first"


def load_template(spec: str | Path | Template | None) -> Template:
    if spec is None:
        return builtin_template("text-first")
    if isinstance(spec, Template):
        return spec
    s = str(spec)
    return Template.load(s) if s.endswith(".toml") or Path(s).exists() else builtin_template(s)


def choose_template(prompts, path: str | None = None, *, given: Template | None = None) -> Template:
    """The template of a spec's [prompts] section (:class:`~logitjudge.spec.PromptSpec`): ``given`` (a Template
    object, the Python API's), else the template file at ``path`` (the spec's, resolved), the built-in it names or
    the paradigm's built-in; checked against the paradigm, with its ``chat`` setting (--chat / --no-chat) over the
    template's own."""
    template = given if given is not None else load_template(
        path or prompts.template or default_template(prompts.multi_criteria, prompts.paradigm))
    template = template.require(prompts.paradigm)
    return template if prompts.chat is None else replace(template, chat=prompts.chat)


def uses_chat(template: Template, tokenizer) -> bool:
    """Whether the prompts go through the judge's chat template: ``chat = true`` / ``false`` as set; ``"auto"``
    where the tokenizer has a chat template (an instruct judge), else plain (a base model such as
    gemma-3-270m, whose GGUF carries none). A chat prompt starts with the template's own special tokens, so it
    is tokenized without the tokenizer's (``add_special_tokens=False``)."""
    if template.chat == "auto":
        return bool(getattr(tokenizer, "chat_template", None))
    return bool(template.chat)


def chat_meta(template: Template, tokenizer) -> dict:
    """What a table's meta says of chat: the setting, whether it was used, and the chat template (Jinja) the
    prompts went through (None when plain)."""
    used = uses_chat(template, tokenizer)
    return {"setting": template.chat, "used": used,
            "chat_template": getattr(tokenizer, "chat_template", None) if used else None}


def wrap_chat(tokenizer, body: str, answer_prefix: str) -> str:
    """The tokenizer's chat template with a generation prompt, then the forced answer prefix."""
    if not getattr(tokenizer, "chat_template", None):
        raise PromptError("chat formatting was asked for (--chat, chat = true) but the judge's tokenizer has no "
                          "chat template; use --no-chat (chat = false or \"auto\") for base models")
    head = tokenizer.apply_chat_template([{"role": "user", "content": body}], tokenize=False,
                                         add_generation_prompt=True)
    return head + answer_prefix.lstrip("\n")


# ---- the label boundary ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class EncodedPrompt:
    """A prompt's shared tokens and each option's continuation tokens (in canonical option order)."""

    prompt_ids: tuple[int, ...]
    continuation_ids: tuple[tuple[int, ...], ...]
    prompt_text: str  # the prompt exactly as tokenized (its tail may have moved into the continuations)
    continuations: tuple[str, ...]
    mended: str = ""  # what the judge's token convention mended in it (logitjudge.tokens.first_tokens)


def check_length(prompt_ids, continuation_ids, max_length: int, where: str) -> None:
    """Refuse a prompt whose longest label continuation ends past the model's context."""
    longest = len(prompt_ids) + max(len(c) for c in continuation_ids)
    if longest > max_length:
        raise PromptError(f"{where}: the prompt is {longest} tokens long but the model's context is "
                          f"{max_length} tokens; shorten the text or use a model with a longer context")


def tokenize(tokenizer, text: str, *, add_special_tokens: bool, where: str = "prompt") -> tuple[list, list, str]:
    """(ids, offsets, mend) of ``text`` as the judge reads it: the tokenizer's encoding held to the judge's token
    convention (:func:`logitjudge.tokens.first_tokens`: one BOS first where it expects one), with what was
    mended ("" if nothing). Every prompt the judge is asked, and the probe's re-tokenization, goes through here."""
    enc = tokenizer(text, add_special_tokens=add_special_tokens, return_offsets_mapping=True)
    return first_tokens(list(enc["input_ids"]), [tuple(x) for x in enc["offset_mapping"]], convention(tokenizer),
                        where=where)


def encode_prompt(tokenizer, prompt: str, continuations: list[str], *, add_special_tokens: bool = True,
                  max_length: int | None = None, where: str = "prompt") -> EncodedPrompt:
    """Tokenize prompt + each continuation together and split at the last token ending inside the prompt.

    Tokenizers that merge the space into the label (" 5") and ones that end the prompt in a lone space token
    (Gemma's "▁") both come out right: the token that straddles the boundary belongs to the continuation.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise PromptError("exact label boundaries need a fast tokenizer (offset mappings); "
                          "load the tokenizer with use_fast=True")
    encs = [tokenize(tokenizer, prompt + c, add_special_tokens=add_special_tokens, where=where)
            for c in continuations]
    ids0, offs0, mended = encs[0]
    limit = len(prompt)
    b = 0
    while b < len(ids0) and offs0[b][1] <= limit and all(len(e[0]) > b and e[0][b] == ids0[b] for e in encs):
        b += 1
    # A special token (offset (0, 0)) after real text is part of the prompt too; nothing else crosses b.
    prompt_ids = tuple(ids0[:b])
    cut = max((o[1] for o in offs0[:b]), default=0)
    conts = tuple(tuple(e[0][b:]) for e in encs)
    unk = getattr(tokenizer, "unk_token_id", None)
    for lab, ids in zip(continuations, conts):
        if not ids:
            raise PromptError(f"{where}: continuation {lab!r} is empty after tokenization")
        if unk is not None and unk in ids:
            raise PromptError(f"{where}: the tokenizer cannot produce the label continuation {lab!r} "
                              f"(it maps to the unknown token {tokenizer.unk_token!r}); use labels made of "
                              "characters in the model's vocabulary")
    for i, a in enumerate(conts):
        for j, c in enumerate(conts):
            if i != j and len(a) <= len(c) and c[:len(a)] == a:
                raise PromptError(
                    f"{where}: label continuation {continuations[i]!r} is a token prefix of "
                    f"{continuations[j]!r}, so its probability is not that of a distinct answer; give the "
                    "template a terminator (e.g. terminator = \"]]\" with answer prefix \"[[\", or \"\\n\")")
    if max_length is not None:
        check_length(prompt_ids, conts, max_length, where)
    tail = prompt[cut:]
    return EncodedPrompt(prompt_ids, conts, prompt[:cut], tuple(tail + c for c in continuations), mended)
