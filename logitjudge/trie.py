"""A token trie over the sequences of one item: every shared run of tokens is computed once.

A sequence is the token ids fed to the model after an item's cached prefix; a *read* asks for the log-probability
of a token at the position after a given index (the next-token distribution there). Sequences that begin alike
(orderings whose first option lines coincide, labels that share a first token) share trie nodes, and reads at the
same node, offset and token are computed once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import LogitJudgeError


class TrieError(LogitJudgeError, ValueError):
    """Sequences or reads a trie cannot hold."""


@dataclass(eq=False)
class Node:
    tokens: list[int] = field(default_factory=list)  # the segment this node adds to its parent's context
    children: list[Node] = field(default_factory=list)
    reads: dict[tuple[int, int], list] = field(default_factory=dict)  # (offset, token) -> [read keys]
    ends: list = field(default_factory=list)  # keys of sequences that end exactly at this node's last token

    def n_tokens(self) -> int:
        return len(self.tokens) + sum(c.n_tokens() for c in self.children)


class _Raw:
    __slots__ = ("children", "reads", "ends")

    def __init__(self):
        self.children: dict[int, _Raw] = {}
        self.reads: dict[int, list] = {}  # token -> keys, read after this node's token
        self.ends: list = []


def build(sequences, reads, end_keys=None, *, min_shared: int = 0) -> list[Node]:
    """The compressed trie of ``sequences``; returns the top-level nodes (the virtual root's children).

    ``reads[s]`` lists ``(index, token, key)``: the log-probability of ``token`` after ``sequences[s][:index+1]``.
    ``end_keys[s]``, if given and not None, tags the node where sequence s ends (to keep its cache).
    ``min_shared``: inner nodes shorter than this are pushed down into their children (their few tokens are
    run once per child) so that siblings batch into one forward call; the top level is never pushed down.
    """
    root = _Raw()
    for s, seq in enumerate(sequences):
        if not seq:
            raise TrieError(f"sequence {s} is empty: every sequence needs at least one token after the prefix")
        path = []
        node = root
        for t in seq:
            child = node.children.get(int(t))
            if child is None:  # not setdefault: that would build a node for every token of every sequence
                child = node.children[int(t)] = _Raw()
            node = child
            path.append(node)
        for index, token, key in reads[s]:
            if not 0 <= index < len(seq):
                raise TrieError(f"read at index {index} is outside sequence {s} of length {len(seq)}")
            path[index].reads.setdefault(int(token), []).append(key)
        if end_keys is not None and end_keys[s] is not None:
            path[-1].ends.append(end_keys[s])
    tops = [_compress(tok, child) for tok, child in root.children.items()]
    if min_shared > 0:
        for t in tops:
            t.children = [m for c in t.children for m in _push_down(c, min_shared)]
    return tops


def _push_down(node: Node, min_shared: int) -> list[Node]:
    node.children = [m for c in node.children for m in _push_down(c, min_shared)]
    if not node.children or node.ends or len(node.tokens) >= min_shared:
        return [node]
    n = len(node.tokens)
    for i, child in enumerate(node.children):
        child.tokens = node.tokens + child.tokens
        child.reads = {(off + n, tok): keys for (off, tok), keys in child.reads.items()}
        if i == 0:  # the pushed-down node's own reads are computed once, in its first child
            child.reads.update(node.reads)
    return node.children


def _compress(token: int, raw: _Raw) -> Node:
    node = Node([token])
    while True:
        off = len(node.tokens) - 1
        for tok, keys in raw.reads.items():
            node.reads[(off, tok)] = list(keys)
        if raw.ends or len(raw.children) != 1:
            break
        (tok, raw), = raw.children.items()
        node.tokens.append(tok)
    node.ends = list(raw.ends)
    node.children = [_compress(t, c) for t, c in raw.children.items()]
    return node


def count_tokens(nodes: list[Node]) -> int:
    """Tokens the trie processes: each shared run counted once."""
    return sum(n.n_tokens() for n in nodes)
