"""The draft_model replay: exactness of teacher forcing against step-by-step autoregressive drafting, vLLM's
compatibility checks, and the optional torch extra (never imported by the core).

The kernel is checked against a plain-Python copy of vLLM's loop (the draft proposes k tokens greedily from
the accepted context, the target accepts the common prefix with its own output, the scheduler trims the draft
to max_model_len - t - 1) driven by a deterministic toy draft; the torch runner against a real (tiny,
random) Llama drafting autoregressively. tests/test_draft_vllm.py compares with a running vLLM.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from advisor.errors import ConfigError
from advisor.measure.draft import DraftModelInfo, check_compatible, replay_draft
from advisor.measure.ngram import ACCEPTED, DECODE_STEPS, DRAFT_TOKENS, DRAFTS, TAIL_AT, TAIL_LEN

REPO = Path(__file__).resolve().parent.parent
COLUMNS = [DRAFTS, DRAFT_TOKENS, ACCEPTED, DECODE_STEPS, TAIL_AT, TAIL_LEN]


def reference(requests, propose, k, max_model_len):
    """vLLM's loop: per step at context t, draft min(k, max_model_len - t - 1) tokens autoregressively."""
    rows, per_pos = [], np.zeros(k, dtype=np.int64)
    for prompt, output in requests:
        sequence = list(prompt) + list(output)
        total, t = len(sequence), len(prompt) + 1
        row = dict.fromkeys(COLUMNS, 0)
        while t < total:
            row[DECODE_STEPS] += 1
            length = max(0, min(k, max_model_len - t - 1))
            accepted = 0
            if length:
                context = sequence[:t]
                draft = []
                for _ in range(length):
                    draft.append(propose(context + draft))
                while accepted < length and t + accepted < total and draft[accepted] == sequence[t + accepted]:
                    accepted += 1
                if accepted == total - t and length > accepted:
                    row[TAIL_AT], row[TAIL_LEN] = accepted, length
                row[DRAFTS] += 1
                row[DRAFT_TOKENS] += length
                row[ACCEPTED] += accepted
                per_pos[:accepted] += 1
            t += accepted + 1
        rows.append([row[c] for c in COLUMNS])
    return rows, per_pos


def teacher_forced(requests, propose):
    """agree[p] = propose(tokens[:p]) == tokens[p] for output positions after the first."""
    agree = []
    for prompt, output in requests:
        sequence = list(prompt) + list(output)
        flags = np.zeros(len(sequence), dtype=np.bool_)
        for p in range(len(prompt) + 1, len(sequence)):
            flags[p] = propose(sequence[:p]) == sequence[p]
        agree.append(flags)
    return agree


@pytest.mark.parametrize("seed", range(4))
def test_teacher_forcing_equals_autoregressive_drafting(seed):
    rng = np.random.default_rng(seed)
    vocab = int(rng.integers(2, 5))
    table = rng.integers(0, vocab, (vocab, vocab))

    def propose(context):  # a deterministic toy draft: a function of the last two tokens
        return int(table[context[-2] % vocab, context[-1] % vocab]) if len(context) > 1 else 0

    requests = []
    for _ in range(30):
        prompt = rng.integers(0, vocab, int(rng.integers(1, 12)))
        output = rng.integers(0, vocab, int(rng.integers(0, 40)))
        # Outputs that often follow the toy draft: long accepted runs, drafts past the logged end.
        for i in range(len(output)):
            if rng.random() < 0.7:
                output[i] = propose(list(prompt) + list(output[:i]))
        requests.append((prompt, output))
    agree = teacher_forced(requests, propose)
    for k in (1, 3, 8):
        for max_model_len in (None, 20, 35):
            counters, per_pos = replay_draft(requests, agree, [k], max_model_len)
            want_rows, want_pos = reference(requests, propose, k, max_model_len or 10**9)
            assert counters[:, 0][:, COLUMNS].tolist() == want_rows
            assert per_pos[0].tolist() == want_pos.tolist()


def _info(vocab_size, tokens=None):
    return DraftModelInfo("draft", "/d", 10, vocab_size, 4096, 2, tokens)


def test_compatibility_follows_vllm_and_compares_tokenizers():
    vocab = {"a": 0, "b": 1, "c": 2}
    assert len(check_compatible(_info(3, dict(vocab)), 3, vocab)) == 2
    with pytest.raises(ConfigError, match="vocab_size 4 differs from the target's 3"):
        check_compatible(_info(4, vocab), 3, vocab)
    with pytest.raises(ConfigError, match="tokenizer differs"):
        check_compatible(_info(3, {"a": 0, "b": 2, "c": 1}), 3, vocab)
    with pytest.raises(ConfigError, match="cannot check"):
        check_compatible(_info(3), None, None)


torch = pytest.importorskip("torch", reason="the draft extra (torch) is not installed")


def _tiny_llama(folder: Path, seed: int, noise_from: Path | None = None) -> Path:
    """A 2-layer Llama with peaked logits (scaled head), or a noisy copy of another one."""
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    if noise_from is not None:
        model = AutoModelForCausalLM.from_pretrained(noise_from, dtype=torch.float32)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.5 * parameter.std() * torch.randn_like(parameter))
    else:
        config = LlamaConfig(vocab_size=48, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                             tie_word_embeddings=False)
        model = LlamaForCausalLM(config)
        with torch.no_grad():
            model.lm_head.weight.mul_(40.0)
    model.save_pretrained(folder)
    return folder


def test_torch_runner_matches_autoregressive_greedy_drafting(tmp_path):
    from advisor.measure.draft import DraftRunner

    target_dir = _tiny_llama(tmp_path / "target", 0)
    draft_dir = _tiny_llama(tmp_path / "draft", 1, noise_from=target_dir)
    target = DraftRunner(str(target_dir))
    target.load()
    target = target.model
    draft = DraftRunner(str(draft_dir))
    draft.load()

    def greedy(model, context):
        with torch.inference_mode():
            return int(model(torch.tensor([context])).logits[0, -1].argmax())

    rng = np.random.default_rng(0)
    requests = []
    for _ in range(6):
        prompt = [int(v) for v in rng.integers(0, 48, int(rng.integers(3, 30)))]
        output = []
        for _ in range(int(rng.integers(5, 40))):
            output.append(greedy(target, prompt + output))
        requests.append((np.array(prompt), np.array(output)))
    # The target teacher-forced on its own greedy output agrees everywhere.
    own = DraftRunner(str(target_dir)).argmax_agreement(requests)
    assert all(flags[len(p) + 1 :].all() for flags, (p, _) in zip(own, requests))

    seen = []
    agree = draft.argmax_agreement(requests, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1][0] == seen[-1][1] == sum(len(p) + len(o) for p, o in requests)
    counters, per_pos = replay_draft(requests, agree, [4], None)
    want_rows, want_pos = reference(requests, lambda context: greedy(draft.model, context), 4, 10**9)
    assert counters[:, 0][:, COLUMNS].tolist() == want_rows
    assert per_pos[0].tolist() == want_pos.tolist()
    assert 0 < counters[:, 0, ACCEPTED].sum() < counters[:, 0, DRAFT_TOKENS].sum()  # a partial agreement


# Importing the package and its CLI loads no torch; the whole profile (HF tokenizer, replays, engine) then runs
# with torch made unimportable, as in the core install. (With torch installed, transformers itself imports it
# when it loads an HF tokenizer; that is transformers' choice, not a dependency of advise.)
LIGHT = r"""
import sys
import advisor, advisor.cli, advisor.profile, advisor.measure.draft, advisor.measure.specreplay
assert "torch" not in sys.modules, "importing advisor loaded torch"
sys.modules["torch"] = None
from advisor.profile import ProfileOptions, build_profile
report = build_profile(ProfileOptions(paths=(sys.argv[1],), tokenizer=sys.argv[2], recommend=True)).report
assert report.replay and report.recommendation
print("ok")
"""

NO_TORCH = r"""
import sys
sys.modules["torch"] = None  # as if the draft extra were not installed: find_spec and import both fail
from advisor.cli import main
sys.argv = ["advise", *sys.argv[1:]]
main()
"""


def _log(tmp_path: Path) -> Path:
    path = tmp_path / "log.jsonl"
    lines = [
        '{"request": {"prompt": "the cat sat on the mat and the cat sat again"}, '
        '"response": {"choices": [{"text": " and the cat sat on the mat"}]}}'
    ] * 3
    path.write_text("\n".join(lines) + "\n")
    return path


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _hf_tokenizer(folder: Path) -> Path:
    """A word-level HF tokenizer folder (tokenizer.json + tokenizer_config.json), loaded via AutoTokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = "the cat sat on mat and again".split()
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]").save_pretrained(folder)
    return folder


def test_core_profile_never_imports_torch(tmp_path):
    tokenizer = _hf_tokenizer(tmp_path / "tokenizer")
    done = subprocess.run([sys.executable, "-c", LIGHT, str(_log(tmp_path)), str(tokenizer)],
                          capture_output=True, text=True, env=_env(), timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_draft_without_the_extra_exits_2_naming_it(tmp_path):
    done = subprocess.run([sys.executable, "-c", NO_TORCH, str(_log(tmp_path)), "--draft", "some/draft",
                           "--no-progress"], capture_output=True, text=True, env=_env(), timeout=600)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "advise[draft]" in lines[0], done.stderr


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "advise"), *args], capture_output=True, text=True,
                          env=_env(), timeout=900)


def test_cli_draft_replay_and_refusal(tmp_path):
    import json

    target = _tiny_llama(tmp_path / "target", 0)
    tokenizer = _hf_tokenizer(tmp_path / "tokenizer")
    log = _log(tmp_path)
    out = tmp_path / "report.json"
    done = _run_cli(str(log), "--model", str(target), "--tokenizer", str(tokenizer), "--draft", str(target),
                    "--no-progress", "-o", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    (section,) = report["draft_replay"]
    assert section["requests_replayed"] == 3 and section["tokens_per_s"] > 0 and section["full_run_cpu_s"] > 0
    assert any("vocab_size" in check for check in section["compatibility"])
    methods = [entry["method"] for entry in report["replay"]]
    assert methods == ["ngram", "suffix", "draft_model"]
    swept = [e["config"]["num_speculative_tokens"] for e in report["replay_sweep"] if e["method"] == "draft_model"]
    assert swept == list(range(1, 9))
    assert "draft target" in done.stdout  # the terminal report shows it beside ngram and suffix

    config = json.loads((target / "config.json").read_text())
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({**config, "vocab_size": 64}))
    for name in os.listdir(target):
        if name != "config.json":
            os.symlink(target / name, other / name)
    refused = _run_cli(str(log), "--model", str(target), "--tokenizer", str(tokenizer), "--draft", str(other),
                       "--no-progress")
    assert refused.returncode == 2 and "vocab_size 64 differs from the target's 48" in refused.stderr
