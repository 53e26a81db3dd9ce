"""Prompt templates and the exact token boundary between a prompt and each option's label continuation.

A template renders instructions, an optional context, the judged text and the rubric (options listed in a given
order), then a forced answer prefix such as ``Score: ``. The probability of an option is the probability of its
whole continuation (label + terminator), so the boundary is found the lm-evaluation-harness way: tokenize
prompt + continuation together and split, here at the last token that ends inside the prompt for every label.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import LogitJudgeError
from .rubric import Criterion, Rubric
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
    chat: bool = False  # wrap the body in the tokenizer's chat template, then the answer prefix
    needs_descriptions: bool = True

    @classmethod
    def load(cls, path: str | Path) -> Template:
        p = Path(path)
        d = read_toml(p, what="template file", error=PromptError)
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise PromptError(f"template file {p}: unknown keys {unknown}; known keys are {sorted(known)}")
        t = cls(**{"name": p.stem, **d})
        for key, need in (("body", "{text}"), ("body", "{rubric}"), ("option_line", "{label}")):
            if need not in getattr(t, key):
                raise PromptError(f"template file {p}: '{key}' must contain {need}")
        return t

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


def builtin_template(name: str) -> Template:
    p = TEMPLATE_DIR / f"{name}.toml"
    if not p.exists():
        avail = sorted(x.stem for x in TEMPLATE_DIR.glob("*.toml"))
        raise PromptError(f"no built-in template {name!r}; available: {avail}, or pass a .toml file")
    return Template.load(p)


def load_template(spec: str | Path | Template | None) -> Template:
    if spec is None:
        return builtin_template("text-first")
    if isinstance(spec, Template):
        return spec
    s = str(spec)
    return Template.load(s) if s.endswith(".toml") or Path(s).exists() else builtin_template(s)


def wrap_chat(tokenizer, body: str, answer_prefix: str) -> str:
    """The tokenizer's chat template with a generation prompt, then the forced answer prefix."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise PromptError("the template asks for chat formatting but the tokenizer has no chat_template; "
                          "use a plain template (chat = false) for base models")
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


def _encode(tokenizer, text: str, add_special: bool):
    enc = tokenizer(text, add_special_tokens=add_special, return_offsets_mapping=True)
    return list(enc["input_ids"]), [tuple(x) for x in enc["offset_mapping"]]


def encode_prompt(tokenizer, prompt: str, continuations: list[str], *, add_special_tokens: bool = True,
                  max_length: int | None = None, where: str = "prompt") -> EncodedPrompt:
    """Tokenize prompt + each continuation together and split at the last token ending inside the prompt.

    Tokenizers that merge the space into the label (" 5") and ones that end the prompt in a lone space token
    (Gemma's "▁") both come out right: the token that straddles the boundary belongs to the continuation.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise PromptError("exact label boundaries need a fast tokenizer (offset mappings); "
                          "load the tokenizer with use_fast=True")
    encs = [_encode(tokenizer, prompt + c, add_special_tokens) for c in continuations]
    ids0, offs0 = encs[0]
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
        longest = len(prompt_ids) + max(len(c) for c in conts)
        if longest > max_length:
            raise PromptError(f"{where}: the prompt is {longest} tokens long but the model's context is "
                              f"{max_length} tokens; shorten the text or use a model with a longer context")
    tail = prompt[cut:]
    return EncodedPrompt(prompt_ids, conts, prompt[:cut], tuple(tail + c for c in continuations))
