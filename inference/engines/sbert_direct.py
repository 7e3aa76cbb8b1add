"""The embedding forward pass of a mean-pooled sentence-transformers model, called
directly: tokenizer, transformer, mean pooling, L2 normalisation, nothing else.

:class:`DirectEncoder` gives the vectors ``SentenceTransformer.encode(...,
normalize_embeddings=True)`` gives (cosine >= 0.9999: checked when it is built, see
:func:`direct_encoder`) at less CPU per call: ``encode`` is a general, multimodal
pipeline; this is the text-only path of all-MiniLM-L6-v2, with three cuts:

- one tokenizer call per forward pass, whose attention mask also gives each text's
  token count (the engine tokenized every batch twice);
- the transformer's linear layers read weights packed once for oneDNN's matrix
  kernels (``torch.ops.mkldnn._reorder_linear_weight``, the packing torch's own CPU
  compiler uses) instead of being repacked on every call. A forward pass of a short
  text is bound by reading the 42 MB of float32 weights (they do not fit in the
  16 MB L3 cache); packed, the linear layers take ~15 % less CPU for 21 word
  pieces, ~20 % for 3 (bench/results/2026-12-05-embedding-forward.md);
- a BERT model's layers are called in a plain loop (:func:`bert_forward`), not
  through ``transformers``' general ``forward`` (~2 ms of Python a call), with each
  layer's query, key and value projections as one linear layer (their weights
  stacked: one matrix product of 22 rows instead of three, ~0.5 ms less a pass) and
  the GELU run by oneDNN on the intermediate layer's output as it is written
  (:func:`bert_fused`).

Used by :class:`inference.engines.sbert.SentenceTransformersEngine`; a model this
path does not fit (another pooling, a prompt, no fast tokenizer) keeps ``encode``.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import numpy as np

logger = logging.getLogger("inference.worker")

# The texts a candidate DirectEncoder must embed as ``encode`` does before it is used:
# short, long (cut at the model's limit), padded together in one pass.
PROBE_TEXTS = (
    "hi",
    "How do I reset my password?",
    "Could you tell me a short story about a river, a lamp and a cedar tree please?",
    " ".join(["the quick brown fox jumps over the lazy dog"] * 40),
    "Ünïcödé, emoji 🙂 and punctuation — all in one line!",
)
# The modules of a model this path embeds with (all-MiniLM-L6-v2's; Normalize optional).
MEAN_POOLED_MODULES = ["Transformer", "Pooling", "Normalize"]
# The least cosine similarity to ``encode``'s vectors that counts as the same vector.
SAME_VECTOR_COSINE = 0.9999


class PackedLinear:
    """A ``torch.nn.Linear`` whose weight is packed once for oneDNN (CPU, float32).

    Called like the layer it replaces: ``(..., in_features)`` -> ``(...,
    out_features)``. Built by :func:`linears_packed`.
    """

    def __init__(self, linear: Any) -> None:
        import torch

        self.weight = torch.ops.mkldnn._reorder_linear_weight(
            linear.weight.detach(), None
        )
        self.bias = None if linear.bias is None else linear.bias.detach()
        self.out_features = int(linear.out_features)
        self._op = torch.ops.mkldnn._linear_pointwise

    def __call__(self, x: Any) -> Any:
        rows = x.reshape(-1, x.shape[-1])
        y = self._op(rows, self.weight, self.bias, "none", [], "")
        return y.reshape(*x.shape[:-1], self.out_features)

    def gelu(self, x: Any) -> Any:
        """``F.gelu(self(x))`` (exact, erf GELU) in one oneDNN call: the GELU is
        applied to the product as it is written, not in a second pass over it."""
        rows = x.reshape(-1, x.shape[-1])
        y = self._op(rows, self.weight, self.bias, "gelu", [], "none")
        return y.reshape(*x.shape[:-1], self.out_features)


def linears_packed(module: Any) -> int:
    """Replace every float32 ``torch.nn.Linear`` inside ``module`` (in place) by a
    module calling :class:`PackedLinear`; return how many were replaced (0 when this
    torch has no oneDNN)."""
    import torch

    if not torch.backends.mkldnn.is_available() or not hasattr(
        torch.ops.mkldnn, "_reorder_linear_weight"
    ):
        return 0

    class _Packed(torch.nn.Module):
        def __init__(self, linear: Any) -> None:
            super().__init__()
            self.packed = PackedLinear(linear)

        def forward(self, x: Any) -> Any:
            return self.packed(x)

    replaced = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear and child.weight.dtype == torch.float32:
                setattr(parent, name, _Packed(child))
                replaced += 1
    return replaced


class DirectEncoder:
    """Embed texts with a mean-pooled sentence-transformers model's own parts.

    ``model``: a loaded ``SentenceTransformer`` whose modules are a text
    ``Transformer``, a mean ``Pooling`` and optionally ``Normalize``. The transformer
    is copied (the model stays as it was, for ``encode``), its pooler dropped (mean
    pooling never reads it) and its linear layers packed (:func:`linears_packed`).
    Raises ``ValueError`` for a model of another shape.
    """

    def __init__(self, model: Any) -> None:
        modules = list(model)
        names = [type(m).__name__ for m in modules]
        if names not in (["Transformer", "Pooling"], MEAN_POOLED_MODULES):
            raise ValueError(f"not a mean-pooled text model: {names}")
        modes = modules[1].pooling_mode
        if [modes] != ["mean"] and list(modes) != ["mean"]:
            raise ValueError(f"pooling {modes!r}, not mean")
        if getattr(model, "default_prompt_name", None) or getattr(
            model, "truncate_dim", None
        ):
            raise ValueError("a default prompt or a truncated dimension")
        tokenizer = model.tokenizer
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError("no fast tokenizer")
        self.tokenizer = tokenizer
        self.max_length = int(model.max_seq_length)
        transformer = copy.deepcopy(modules[0].auto_model).eval()
        if getattr(transformer, "pooler", None) is not None:
            transformer.pooler = None
        self.plain_bert = plain_bert(transformer.config)
        if self.plain_bert:
            bert_fused(transformer)
        self.packed = linears_packed(transformer)
        self.transformer = transformer

    def encode(self, texts: list[str], *, batch_size: int) -> tuple[Any, list[int]]:
        """Return ``(vectors, tokens)``: a ``(len(texts), dim)`` float32 array of unit
        rows, in input order, and each text's word pieces read (special tokens in,
        cut at ``max_length``). Texts are run ``batch_size`` at a time, longest first,
        so each pass pads to a similar length."""
        import torch

        count = len(texts)
        order = sorted(range(count), key=lambda i: -len(texts[i]))
        vectors: Any = None
        tokens = [0] * count
        with torch.inference_mode():
            for start in range(0, count, batch_size):
                rows = order[start : start + batch_size]
                features = self.tokenizer(
                    [texts[i] for i in rows],
                    padding=True,
                    truncation="longest_first",
                    max_length=self.max_length,
                    return_tensors="pt",
                )
                if self.plain_bert:
                    hidden = bert_forward(self.transformer, features)
                else:
                    hidden = self.transformer(**features).last_hidden_state
                mask = features["attention_mask"]
                weights = mask.unsqueeze(-1).to(hidden.dtype)
                counts = weights.sum(1)
                pooled = (hidden * weights).sum(1) / torch.clamp(counts, min=1e-9)
                unit = torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()
                if vectors is None:
                    vectors = np.empty((count, unit.shape[1]), dtype=np.float32)
                vectors[rows] = unit
                for i, n in zip(rows, mask.sum(1).tolist(), strict=True):
                    tokens[i] = int(n)
        return vectors, tokens


def plain_bert(config: Any) -> bool:
    """True for an encoder-only BERT with learned absolute positions and exact GELU
    (all-MiniLM-L6-v2's), which :func:`bert_forward` runs."""
    return (
        getattr(config, "model_type", "") == "bert"
        and getattr(config, "position_embedding_type", "absolute") == "absolute"
        and getattr(config, "hidden_act", "") == "gelu"
        and not getattr(config, "is_decoder", False)
        and not getattr(config, "add_cross_attention", False)
    )


def bert_fused(bert: Any) -> None:
    """Prepare a :func:`plain_bert` ``transformers`` BertModel (a private copy) for
    :func:`bert_forward`, in place: each layer's ``query``, ``key`` and ``value``
    linear layers become one, ``attention.self.qkv`` (``hidden`` -> ``3 * hidden``,
    weights and biases stacked in that order; the three are removed). Each output
    column is the same dot product as before, so the hidden states agree with the
    three separate products to float32 rounding. The model's own ``forward`` can no
    longer run it."""
    import torch

    for layer in bert.encoder.layer:
        attention = layer.attention.self
        parts = (attention.query, attention.key, attention.value)
        hidden = int(parts[0].in_features)
        qkv = torch.nn.Linear(hidden, sum(int(p.out_features) for p in parts))
        with torch.no_grad():
            qkv.weight.copy_(torch.cat([p.weight for p in parts]))
            qkv.bias.copy_(torch.cat([p.bias for p in parts]))
        attention.qkv = qkv.eval()
        del attention.query, attention.key, attention.value


def _gelu_of(dense: Any, x: Any) -> Any:
    """``F.gelu(dense(x))``: in one oneDNN call when ``dense`` holds a
    :class:`PackedLinear` (:func:`linears_packed`), else in two."""
    import torch.nn.functional as F

    packed = getattr(dense, "packed", None)
    return packed.gelu(x) if packed is not None else F.gelu(dense(x))


def bert_forward(bert: Any, features: Any) -> Any:
    """The last hidden states ``(batch, length, hidden)`` of a :func:`plain_bert`
    ``transformers`` BertModel (in eval mode, prepared by :func:`bert_fused`) for a
    tokenizer's ``features`` (``input_ids``, ``attention_mask``, optional
    ``token_type_ids``: ``(batch, length)``): the same operations as its
    ``forward``, without the general machinery around them (masks for every
    attention kind, caches, output recorders), which cost ~2 ms of Python per call,
    ~10 % of a short text's pass. Positions that are padding hold values no caller
    may read."""
    import torch
    import torch.nn.functional as F

    ids, mask = features["input_ids"], features["attention_mask"]
    types = features.get("token_type_ids")
    if types is None:
        types = torch.zeros_like(ids)
    batch, length = ids.shape
    emb = bert.embeddings
    x = emb.LayerNorm(
        emb.word_embeddings(ids)
        + emb.token_type_embeddings(types)
        + emb.position_embeddings.weight[:length]
    )
    keep = None if bool(mask.all()) else mask[:, None, None, :].bool()
    heads = bert.config.num_attention_heads
    for layer in bert.encoder.layer:
        qkv = layer.attention.self.qkv(x).view(batch, length, 3, heads, -1)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        context = context.transpose(1, 2).reshape(batch, length, -1)
        out = layer.attention.output
        x = out.LayerNorm(out.dense(context) + x)
        hidden = _gelu_of(layer.intermediate.dense, x)
        x = layer.output.LayerNorm(layer.output.dense(hidden) + x)
    return x


def direct_encoder(model: Any, *, batch_size: int) -> DirectEncoder | None:
    """Return a :class:`DirectEncoder` of ``model`` if it embeds :data:`PROBE_TEXTS`
    as ``encode`` does (each cosine >= :data:`SAME_VECTOR_COSINE`, the same token
    counts); else None (logged), and the caller keeps ``encode``."""
    try:
        encoder = DirectEncoder(model)
        probe = list(PROBE_TEXTS)
        got, tokens = encoder.encode(probe, batch_size=batch_size)
    except (ValueError, RuntimeError, AttributeError, TypeError) as exc:
        logger.info("embedding model: encode() kept (%s)", exc)
        return None
    want = model.encode(
        probe,
        batch_size=batch_size,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    want_tokens = [
        len(ids)
        for ids in model.tokenizer(
            probe, truncation=True, max_length=encoder.max_length
        )["input_ids"]
    ]
    cosines = (np.asarray(got, dtype=np.float64) * want).sum(axis=1)
    if float(cosines.min()) < SAME_VECTOR_COSINE or tokens != want_tokens:
        logger.warning(
            "embedding model: the direct forward pass differs from encode() "
            "(least cosine %.6f, tokens %s vs %s); encode() kept",
            float(cosines.min()),
            tokens,
            want_tokens,
        )
        return None
    return encoder
