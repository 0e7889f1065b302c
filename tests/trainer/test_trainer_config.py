"""Config errors are named, and the CLI stops on them before loading any model."""

from __future__ import annotations

import pytest

from reweighter_trainer.config import ConfigError, grpo_args, load_raw, parse
from reweighter_trainer.train import build_backend

SMOKE = "trainer/configs/smoke-cpu.yaml"


def _cfg(*overrides: str):
    return parse(load_raw(SMOKE, list(overrides)))


def test_smoke_config_parses():
    cfg = _cfg()
    assert cfg.reweighter.backend == "http" and cfg.model.tiny == {}
    args = grpo_args(cfg)
    assert args.num_generations == 4 and args.max_steps == 3


def test_overrides_are_typed_and_dotted():
    cfg = _cfg(
        "max_steps=7",
        "reweighter.url=grpc://h:1",
        "reweighter.method=mmr",
        "reweighter.params.lambda=0.25",
    )
    assert cfg.grpo["max_steps"] == 7
    assert cfg.reweighter.backend == "grpc" and cfg.reweighter.target == "grpc://h:1"
    assert cfg.reweighter.params == {"lambda": 0.25}


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["reweighter.method=nope"], "reweighter.method"),
        (["reweighter.params.similarity_floor=abc"], "reweighter.params.similarity_floor"),
        (["reweighter.method=mmr", "reweighter.params.lambda=2"], "reweighter.params.lambda"),
        (["reweighter.grpc=h:1"], "reweighter.grpc is gone: the backend is one URL"),
        (["reweighter.backend=inprocess"], "reweighter.backend is gone: the backend is one URL"),
        (["reweighter.long_text=tail"], "reweighter.long_text"),
        (["reweighter.colour=red"], "reweighter.colour"),
        (["dataset.name=imagenet"], "dataset.name"),
        (["model.name_or_path=x"], "exactly one of model.name_or_path or model.tiny"),
        (["reweighter.quality_reward=acuracy"], "reweighter.quality_reward: 'acuracy' is not"),
        (["reweighter.quality_reward=cosine"], "reweighter.quality_reward: 'cosine' is not"),
        (["reweighter.quality_reward=[]"], "reweighter.quality_reward: name at least one"),
        (["reweighter.quality_reward=3"], "reweighter.quality_reward"),
    ],
)
def test_bad_sections_are_named(overrides, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        _cfg(*overrides)


def test_unknown_grpo_field_is_named():
    with pytest.raises(ConfigError, match="max_stepz"):
        grpo_args(_cfg("max_stepz=3"))


def test_service_advantages_need_unscaled_rewards():
    with pytest.raises(ConfigError, match="scale_rewards"):
        grpo_args(_cfg("reweighter.advantages=grpo"))
    assert grpo_args(_cfg("reweighter.advantages=grpo", "scale_rewards=none"))


def test_unreachable_service_is_named(free_port):
    cfg = _cfg(f"reweighter.url=http://127.0.0.1:{free_port}")
    with pytest.raises(ConfigError, match=f"reweighter.url: cannot reach .*:{free_port}"):
        build_backend(cfg.reweighter, rank=0)


@pytest.mark.parametrize("kind", ["method", "unreachable"])
def test_cli_fails_fast_before_any_model_loads(run_cli, free_port, kind, tmp_path):
    # The model path does not exist: had the CLI tried to load it, the error would be about it.
    args = [
        "model.tiny=null",
        f"model.name_or_path={tmp_path}/no-such-model",
        f"output_dir={tmp_path}/out",
    ]
    if kind == "method":
        args.append("reweighter.method=dpp")
        expected = "reweighter.method: unknown method 'dpp'"
    else:
        args.append(f"reweighter.url=http://127.0.0.1:{free_port}")
        expected = f"reweighter.url: cannot reach the Reweighter at http://127.0.0.1:{free_port}"
    proc = run_cli(args, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr
    assert "no-such-model" not in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_gpu_example_config_is_valid_server_mode():
    cfg = parse(load_raw("trainer/configs/gsm8k.yaml", ["reweighter.api_key=", "bf16=false"]))
    args = grpo_args(cfg)
    assert cfg.reweighter.api_key is None  # an unset env var in compose means no key
    assert args.use_vllm and args.vllm_mode == "server"
    assert args.generation_batch_size % args.num_generations == 0


def test_quality_reward_names_the_quality_terms(engine):
    """reweighter.quality_reward: the named reward functions' weighted part goes with each group
    as its quality (the request the backend gets), the format term is added back unchanged."""
    from reweighter_trainer.rewards import accuracy_reward
    from reweighter_trainer.train import build_reward

    assert _cfg().reweighter.quality_rewards == []
    cfg = _cfg("reweighter.quality_reward=accuracy", "reweighter.method=darling")
    assert cfg.reweighter.quality_rewards == ["accuracy"]
    assert _cfg("reweighter.quality_reward=[accuracy, format]").reweighter.quality_rewards == [
        "accuracy", "format"
    ]

    class Recording:
        def __init__(self) -> None:
            self.requests = []

        def reweight(self, request):
            self.requests.append(request)
            return engine.reweight(request)

    backend = Recording()
    reward = build_reward(cfg, grpo_args(cfg), backend)
    assert reward.quality == [accuracy_reward]
    right = "<think>3 and 4</think><answer>7</answer>"
    completions = [right, right, right, "<answer>8</answer>"]
    out = reward(["what is 3 + 4?"] * 4, completions, answer=["7"] * 4)
    (request,) = backend.requests
    (group,) = request.groups
    assert list(group.rewards) == pytest.approx([1.2, 1.2, 1.2, 0.1])  # accuracy + 0.2 format
    assert list(group.quality) == pytest.approx([1.0, 1.0, 1.0, 0.0])  # accuracy alone
    assert out[3] == pytest.approx(0.1)  # the wrong answer's format term, unscaled
    assert min(out[:3]) > out[3]  # three right copies stay above the wrong one
