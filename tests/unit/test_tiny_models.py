"""The tiny-model builder: deterministic bytes, a cache that costs nothing the
second time, safe concurrent use, and tokenizers that transformers loads.

No server is started; the vLLM behaviour of these models is covered by the
integration tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="building the tiny models needs transformers")
pytest.importorskip("tokenizers", reason="building the tiny models needs tokenizers")
pytest.importorskip("safetensors", reason="building the tiny models needs safetensors")
torch = pytest.importorskip("torch", reason="building the tiny models needs torch")

from fixtures import tiny_models  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _tree(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    return tiny_models.build_all(tmp_path_factory.mktemp("cache-a"))


def test_cache_layout(built):
    assert list(built) == list(tiny_models.MODEL_NAMES)
    version_dir = built["tiny-llama"].parent
    assert version_dir.name == tiny_models.builder_hash()
    for name, path in built.items():
        assert path == version_dir / name
        assert (path / tiny_models.COMPLETE_MARKER).is_file()
    # Work directories are renamed into place, never left behind.
    leftovers = [p.name for p in version_dir.iterdir() if p.is_dir() and p.name not in tiny_models.MODEL_NAMES]
    assert leftovers == []


def test_fresh_process_builds_identical_bytes(built, tmp_path_factory):
    # A separate interpreter proves the result does not depend on in-process
    # state (the tokenizer is trained once per process and cached).
    root_b = tmp_path_factory.mktemp("cache-b")
    result = subprocess.run(
        [sys.executable, "-m", "fixtures.tiny_models", "--cache-root", str(root_b)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    printed = {}
    for line in result.stdout.splitlines():
        name, path, fp = line.split("\t")
        printed[name] = (Path(path), fp)
    assert list(printed) == list(tiny_models.MODEL_NAMES)
    for name, path_a in built.items():
        path_b, fp_b = printed[name]
        assert path_b == root_b / tiny_models.builder_hash() / name
        assert tiny_models.read_fingerprint(path_a) == fp_b == tiny_models.fingerprint(path_a)
        assert _tree(path_a) == _tree(path_b), f"{name} differs between two builds"


def test_fingerprints_are_distinct(built):
    fingerprints = {tiny_models.read_fingerprint(p) for p in built.values()}
    assert len(fingerprints) == len(built)


def test_second_call_hits_cache(built, monkeypatch):
    before = {name: (p / "model.safetensors").stat().st_mtime_ns for name, p in built.items()}

    def must_not_build(*args, **kwargs):
        raise AssertionError("a cached model was rebuilt")

    monkeypatch.setattr(tiny_models, "_build_into", must_not_build)
    cache_root = next(iter(built.values())).parent.parent
    assert tiny_models.build_all(cache_root) == built
    after = {name: (p / "model.safetensors").stat().st_mtime_ns for name, p in built.items()}
    assert after == before


def test_cache_root_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(tiny_models.CACHE_ENV_VAR, str(tmp_path))
    assert tiny_models.default_cache_root() == tmp_path
    monkeypatch.delenv(tiny_models.CACHE_ENV_VAR)
    assert tiny_models.default_cache_root() == REPO / ".cache" / "tiny-models"


def test_concurrent_builds_build_once(tmp_path, monkeypatch):
    # flock locks belong to open file descriptions, so threads that each open
    # the lock file exclude each other just as xdist worker processes do.
    calls = []
    real_build_into = tiny_models._build_into

    def counting_build_into(name, model_dir):
        calls.append(name)
        real_build_into(name, model_dir)

    monkeypatch.setattr(tiny_models, "_build_into", counting_build_into)
    results, errors = [], []

    def worker():
        try:
            results.append(tiny_models.build("tiny-llama", tmp_path))
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert len(results) == 4 and len(set(results)) == 1
    assert calls == ["tiny-llama"]


def test_stale_work_dirs_only_of_the_same_model_are_removed(tmp_path):
    version_dir = tmp_path / tiny_models.builder_hash()
    version_dir.mkdir()
    stale = version_dir / ".building-tiny-llama.crashed"
    other = version_dir / ".building-tiny-llama-perturbed.live"
    stale.mkdir()
    other.mkdir()
    tiny_models.build("tiny-llama", tmp_path)
    assert not stale.exists()
    # Another model whose name starts with "tiny-llama" may be mid-build.
    assert other.exists()


def test_unknown_name_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown tiny model"):
        tiny_models.build("tiny-gpt", tmp_path)


def test_llama_tokenizer_and_chat_template(built):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(built["tiny-llama"])
    assert len(tokenizer) == tiny_models.VOCAB_SIZE == 4096
    assert tokenizer.eos_token == "<|endoftext|>"
    assert tokenizer.pad_token == "<|pad|>"
    assert tokenizer.model_max_length == 2048
    for token_id, token in enumerate(tiny_models.SPECIAL_TOKENS):
        assert tokenizer.convert_tokens_to_ids(token) == token_id
    rendered = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello world"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert rendered == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello world<|im_end|>\n<|im_start|>assistant\n"
    )
    text = "Hello world, café 日本語 🙂"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text  # byte-level: round trip, no BOS added
    assert 0 < len(ids) < len(text.encode())


def test_bert_tokenizer_frames_with_cls_and_sep(built):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(built["tiny-bert"])
    assert len(tokenizer) == 4096
    assert tokenizer.model_max_length == 512
    ids = tokenizer("Hello world")["input_ids"]
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|cls|>")
    assert ids[-1] == tokenizer.convert_tokens_to_ids("<|sep|>")


def test_configs(built):
    def config(name):
        return json.loads((built[name] / "config.json").read_text())

    llama = config("tiny-llama")
    assert llama["architectures"] == ["LlamaForCausalLM"]
    assert (llama["hidden_size"], llama["intermediate_size"], llama["num_hidden_layers"]) == (128, 256, 2)
    assert (llama["num_attention_heads"], llama["head_dim"], llama["num_key_value_heads"]) == (4, 32, 2)
    assert llama["max_position_embeddings"] == 2048
    assert "rope_scaling" not in llama

    assert config("tiny-bert")["architectures"] == ["BertModel"]
    assert config("tiny-bert")["max_position_embeddings"] == 512

    yarn_block = {"type": "yarn", "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}
    for name, max_positions in (("tiny-llama-yarn", 2048), ("tiny-llama-yarn512", 512)):
        cfg = config(name)
        assert cfg["rope_scaling"] == yarn_block
        assert "rope_parameters" not in cfg
        assert cfg["max_position_embeddings"] == max_positions
        # Same weights as tiny-llama: only the config differs.
        assert (built[name] / "model.safetensors").read_bytes() == (
            built["tiny-llama"] / "model.safetensors"
        ).read_bytes()
    # The wrong-factor copy differs from tiny-llama-yarn in the factor alone.
    assert {**config("tiny-llama-yarn512-factor2"), "rope_scaling": yarn_block} == config("tiny-llama-yarn512")
    assert config("tiny-llama-yarn512-factor2")["rope_scaling"]["factor"] == 2.0
    # The wrong-rotary-base copy differs from tiny-llama in rope_theta alone, with the same weights.
    assert {**config("tiny-llama-rope-theta500k"), "rope_theta": 10000.0} == config("tiny-llama")
    assert config("tiny-llama-rope-theta500k")["rope_theta"] == 500000.0
    assert (built["tiny-llama-rope-theta500k"] / "model.safetensors").read_bytes() == (
        built["tiny-llama"] / "model.safetensors"
    ).read_bytes()


def test_perturbed_model_permutes_one_down_proj(built):
    from safetensors.torch import load_file

    base = load_file(built["tiny-llama"] / "model.safetensors")
    perturbed = load_file(built["tiny-llama-perturbed"] / "model.safetensors")
    assert base.keys() == perturbed.keys()
    key = f"model.layers.{tiny_models.PERTURBED_LAYER}.mlp.down_proj.weight"
    changed = [k for k in base if not torch.equal(base[k], perturbed[k])]
    assert changed == [key]
    order = torch.tensor(tiny_models.down_proj_permutation())
    assert torch.equal(perturbed[key], base[key][:, order])
    assert (built["tiny-llama-perturbed"] / "tokenizer.json").read_bytes() == (
        built["tiny-llama"] / "tokenizer.json"
    ).read_bytes()


def test_perturbed_model_changes_greedy_output(built):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(built["tiny-llama"])
    ids = tokenizer("Hello, my name is", return_tensors="pt")["input_ids"]
    next_tokens = []
    for name in ("tiny-llama", "tiny-llama-perturbed"):
        model = AutoModelForCausalLM.from_pretrained(built[name])
        with torch.no_grad():
            logits = model(ids).logits[0, -1]
        next_tokens.append(int(logits.argmax()))
    assert next_tokens[0] != next_tokens[1]


def test_other_seed_model_is_tiny_llama_with_other_weights(built):
    from safetensors.torch import load_file

    other = built["tiny-llama-other-seed"]
    for shared in ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (other / shared).read_bytes() == (built["tiny-llama"] / shared).read_bytes(), shared
    base, reseeded = load_file(built["tiny-llama"] / "model.safetensors"), load_file(other / "model.safetensors")
    assert base.keys() == reseeded.keys()
    drawn = [key for key in base if not key.endswith("norm.weight")]
    assert drawn and not any(torch.equal(base[key], reseeded[key]) for key in drawn)
