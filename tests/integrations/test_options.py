"""One options model for every integration (integrations/options.py): the same names and
defaults from TRL's `reweighted`, the trainer's config, verl's keys and the environment; every
option applied by its backend or refused naming it, never dropped; and the one collective
(`_distributed.on_main`) the TRL glue uses."""

from __future__ import annotations

import pytest

from reweighter.client import DEFAULT_TIMEOUT_S, connect
from reweighter.integrations import _distributed
from reweighter.integrations.options import ReweighterOptions
from reweighter.integrations.trl import reweighted


def _zero(prompts, completions, **_):  # noqa: ANN001, ANN202 - TRL's reward convention
    return [0.0] * len(completions)


def test_a_network_backend_refuses_the_in_process_settings() -> None:
    for url in ("http://127.0.0.1:9", "grpc://127.0.0.1:9"):
        with pytest.raises(ValueError, match=r"settings \['long_text'\].*is a server"):
            connect(url, settings={"long_text": "tail"})
        with pytest.raises(ValueError, match="is a server"):
            reweighted(_zero, num_generations=2, backend=url, long_text="tail")


def test_the_in_process_backend_refuses_network_options() -> None:
    with pytest.raises(ValueError, match="api_key: the in-process backend has no network"):
        connect("inprocess", api_key="secret")
    with pytest.raises(ValueError, match="timeout_s: the in-process backend has no network"):
        reweighted(_zero, num_generations=2, backend="inprocess", timeout_s=5)


def test_reweighted_applies_timeout_s_and_the_request_options() -> None:
    fn = reweighted(_zero, num_generations=2, backend="http://127.0.0.1:9", timeout_s=7.5,
                    method="mmr", params={"lambda": 0.5}, advantages="grpo")  # fmt: skip
    try:
        assert fn.backend.aio.timeout == 7.5  # type: ignore[attr-defined]
        assert (fn.method, dict(fn.params), fn.advantages) == ("mmr", {"lambda": 0.5}, "grpo")
    finally:
        fn.backend.close()
    default = reweighted(_zero, num_generations=2, backend="grpc://127.0.0.1:9")
    try:
        assert default.backend.aio.timeout == DEFAULT_TIMEOUT_S  # type: ignore[attr-defined]
    finally:
        default.backend.close()


def test_an_object_backend_refuses_connection_options() -> None:
    class Backend:
        def reweight(self, request):  # noqa: ANN001, ANN202
            raise AssertionError("not called")

    with pytest.raises(ValueError, match="api_key: applies to a backend given as a URL"):
        reweighted(_zero, num_generations=2, backend=Backend(), api_key="k")


def test_the_environment_names_its_variable() -> None:
    env = {"REWEIGHTER_URL": "grpc://h:1", "REWEIGHTER_PARAMS": '{"lambda": 0.5}',
           "REWEIGHTER_METHOD": "mmr", "REWEIGHTER_TIMEOUT_S": "9"}  # fmt: skip
    opts = ReweighterOptions.from_env(env)
    assert (opts.url, opts.method, opts.params, opts.timeout_s) == (
        "grpc://h:1", "mmr", {"lambda": 0.5}, 9.0,
    )  # fmt: skip
    assert ReweighterOptions.from_env({}) == ReweighterOptions()  # every default, unset
    with pytest.raises(ValueError, match="REWEIGHTER_TIMEOUT_S: "):
        ReweighterOptions.from_env({"REWEIGHTER_TIMEOUT_S": "soon"})
    with pytest.raises(ValueError, match="REWEIGHTER_PARAMS is not JSON"):
        ReweighterOptions.from_env({"REWEIGHTER_PARAMS": "{lambda"})
    with pytest.raises(ValueError, match="REWEIGHTER_ADVANTAGES: "):
        ReweighterOptions.from_env({"REWEIGHTER_ADVANTAGES": "ppo"})


def test_a_stack_key_is_named_as_the_stack_spells_it() -> None:
    with pytest.raises(ValueError, match=r"reward\.reweighter\.timeout_s: "):
        ReweighterOptions.parse({"timeout_s": -1}, lambda k: f"reward.reweighter.{k}")
    with pytest.raises(ValueError, match=r"reward\.reweighter\.colour: "):
        ReweighterOptions.parse({"colour": "red"}, lambda k: f"reward.reweighter.{k}")


def test_the_trainer_config_section_is_the_options_model() -> None:
    from reweighter_trainer.config import ReweighterSection

    shared = set(ReweighterOptions.model_fields)
    assert shared <= set(ReweighterSection.model_fields)
    for name in shared - {"url", "timeout_s"}:  # the two the trainer narrows, said there
        mine, theirs = ReweighterSection.model_fields[name], ReweighterOptions.model_fields[name]
        assert (mine.annotation, mine.description, mine.get_default(call_default_factory=True)) == (
            theirs.annotation, theirs.description, theirs.get_default(call_default_factory=True)
        ), name


def test_on_main_computes_once_and_hands_each_rank_its_part() -> None:
    calls = []

    def compute(slices: list[list[int]]) -> list[int]:
        calls.append(slices)
        return [v * 10 for s in slices for v in s]

    result, slices, rank = _distributed.on_main([1, 2], compute)  # one process: no collective
    assert (result, slices, rank, calls) == ([10, 20], [[1, 2]], 0, [[[1, 2]]])
    assert _distributed.my_part([10, 20, 30, 40, 50], [2, 3], 1) == [30, 40, 50]
    assert _distributed.my_part([10, 20, 30, 40, 50], [2, 3], 0) == [10, 20]
