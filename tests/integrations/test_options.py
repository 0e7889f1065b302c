"""One options model for every integration (integrations/options.py): the same names and
defaults from TRL's `reweighted`, the trainer's config, verl's keys and the environment; every
option applied by its backend or refused naming it, never dropped; and the one collective
(`_distributed.on_main`) the TRL glue uses."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest

from reweighter.client import DEFAULT_TIMEOUT_S, DEFAULT_URL, connect
from reweighter.integrations import _distributed
from reweighter.integrations.options import UNSUPPORTED, ReweighterOptions
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


def test_reweighted_restates_no_option_and_defaults_to_the_options_url() -> None:
    """reweighted() takes ReweighterOptions' fields as they are (an unknown one is refused
    naming it) and, with no backend, the options' one default URL."""
    fields = set(inspect.signature(reweighted).parameters)
    assert not fields & set(ReweighterOptions.model_fields), "restated in reweighted()"
    with pytest.raises(ValueError, match="colour"):
        reweighted(_zero, num_generations=2, colour="red")
    fn = reweighted(_zero, num_generations=2)
    try:
        assert fn.options.url == ReweighterOptions().url == DEFAULT_URL
    finally:
        fn.backend.close()


def test_reweighted_applies_timeout_s_and_the_request_options() -> None:
    fn = reweighted(_zero, num_generations=2, backend="http://127.0.0.1:9", timeout_s=7.5,
                    method="mmr", params={"lambda": 0.5}, advantages="grpo")  # fmt: skip
    try:
        assert fn.backend.aio.timeout == 7.5  # type: ignore[attr-defined]
        opts = fn.options
        assert (opts.method, opts.params, opts.advantages) == ("mmr", {"lambda": 0.5}, "grpo")
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


# -- every stack: the same options, each applied or refused naming it (issue 29) -----------

NON_DEFAULT: dict[str, Any] = {
    "url": "grpc://127.0.0.1:9",
    "api_key": "k",
    "timeout_s": 7.5,
    "long_text": "tail",
    "method": "mmr",
    "params": {"similarity_floor": 0.1},  # dra's (the trainer checks them against the method)
    "advantages": "grpo",
    "advantage_params": {"k": 2},
}
"""A value other than the default for every option (the test below checks it is complete)."""
NETWORK, IN_PROCESS = "http://127.0.0.1:9", "inprocess"
BACKEND_REFUSES = {("api_key", IN_PROCESS), ("timeout_s", IN_PROCESS), ("long_text", NETWORK)}


def _trl(given: dict[str, Any]) -> tuple[ReweighterOptions, Any]:
    kw = dict(given)
    fn = reweighted(_zero, num_generations=2, backend=kw.pop("url"), **kw)
    return fn.options, fn.backend  # the options are what the reward function sends


def _trainer(given: dict[str, Any]) -> tuple[ReweighterOptions, Any]:
    from reweighter_trainer.config import parse

    cfg = parse({"model": {"tiny": {}}, "reweighter": given})
    return cfg.reweighter, cfg.reweighter.connect()  # what build_backend connects with


def _verl(given: dict[str, Any]) -> tuple[ReweighterOptions, Any]:
    verl = pytest.importorskip("reweighter.integrations.verl", exc_type=ImportError)
    options = verl.verl_options(given)
    return options, options.connect()  # what the manager's `backend` connects with


def _slime(given: dict[str, Any]) -> tuple[ReweighterOptions, Any]:
    from reweighter.integrations.slime import options_from_env

    env = {f"REWEIGHTER_{k.upper()}": v if isinstance(v, str) else json.dumps(v)
           for k, v in given.items()}  # fmt: skip
    options = options_from_env(env)
    return options, options.connect()


def _skyrl(given: dict[str, Any]) -> tuple[ReweighterOptions, Any]:
    from reweighter.integrations.skyrl import ReweighterPostprocessMixin

    cls = type("Trainer", (ReweighterPostprocessMixin,), {f"reweighter_{k}": v
                                                          for k, v in given.items()})  # fmt: skip
    options = cls().reweighter_options
    return options, options.connect()  # what postprocess_generator_output connects with


STACKS = {"trl": _trl, "trainer": _trainer, "verl": _verl, "slime": _slime, "skyrl": _skyrl}
SPELT = {"trl": "{}", "trainer": "reweighter.{}", "verl": "reward.reweighter.{}",
         "slime": "REWEIGHTER_{}", "skyrl": "Trainer.reweighter_{}"}  # fmt: skip


def _applied(options: ReweighterOptions, client: Any, name: str, value: Any) -> None:
    """The option is in the options the stack uses, and in the client they connected."""
    got = options.target if name == "url" else getattr(options, name)
    assert got == value, (name, got)
    aio = getattr(client, "aio", None)
    if name == "timeout_s":
        assert aio.timeout == value
    elif name == "api_key":
        assert ("authorization", "Bearer k") in getattr(aio, "_metadata", ()) or (
            aio._headers == {"authorization": "Bearer k"}
        )
    elif name == "long_text":
        assert dict(aio._settings) == {"long_text": value}
    elif name == "url":
        assert type(client).__name__ == "GrpcReweighterClient"


def test_every_option_has_a_non_default_case_and_every_stack_a_row() -> None:
    assert set(NON_DEFAULT) == set(ReweighterOptions.model_fields)
    assert set(STACKS) == set(UNSUPPORTED)
    for name, value in NON_DEFAULT.items():
        assert value != ReweighterOptions.model_fields[name].get_default(call_default_factory=True)


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("name", NON_DEFAULT)
@pytest.mark.parametrize("url", [NETWORK, IN_PROCESS])
def test_every_stack_applies_or_refuses_every_option_naming_it(
    stack: str, name: str, url: str
) -> None:
    """No option is silently ignored by any stack: with any backend, every option is either
    applied (in the options the stack uses and in the client it connects) or refused with a
    ValueError naming it as that stack spells it; the refusals are the same for every stack
    but what the stack itself decides (UNSUPPORTED)."""
    given = {"url": url, name: NON_DEFAULT[name]}
    if (stack, name) == ("verl", "timeout_s"):  # verl's own key: a member's wait, not a call's
        verl = pytest.importorskip("reweighter.integrations.verl", exc_type=ImportError)
        assert name in verl.VERL_KEYS and verl.verl_options(given).timeout_s is None
        return
    refused = name in UNSUPPORTED[stack] or (name, url) in BACKEND_REFUSES
    spelt = SPELT[stack].format(name.upper() if stack == "slime" else name)
    if refused:
        with pytest.raises(ValueError, match=re.escape(spelt) + ": "):
            STACKS[stack](given)
        return
    options, client = STACKS[stack](given)
    try:
        _applied(options, client, name, NON_DEFAULT[name])
    finally:
        client.close()


def test_the_same_option_is_refused_with_the_same_reason_everywhere() -> None:
    reasons = set()
    for stack, build in STACKS.items():
        if stack == "verl":
            pytest.importorskip("verl")
        with pytest.raises(ValueError) as e:
            build({"url": IN_PROCESS, "api_key": "k"})
        reasons.add(re.split("(?i)api_key: ", str(e.value), maxsplit=1)[1])
    assert reasons == {"the in-process backend has no network; leave it unset"}


def test_a_misspelt_option_is_refused_by_the_stacks_that_read_keys() -> None:
    from reweighter.integrations.skyrl import ReweighterPostprocessMixin
    from reweighter_trainer.config import ConfigError, parse

    with pytest.raises(ValueError, match=r"Trainer\.reweighter_methd: not a Reweighter option"):
        type("Trainer", (ReweighterPostprocessMixin,), {"reweighter_methd": "mmr"})
    late = type("Trainer", (ReweighterPostprocessMixin,), {})
    late.reweighter_method = "mmr"  # assigned after the class was defined: still read
    assert late().reweighter_options.method == "mmr"
    late.reweighter_advantages = "grpo"
    with pytest.raises(ValueError, match=r"Trainer\.reweighter_advantages: SkyRL computes"):
        late().reweighter_options  # noqa: B018 - read at the first call, refused there
    with pytest.raises(ConfigError, match=r"reweighter\.methd"):
        parse({"model": {"tiny": {}}, "reweighter": {"methd": "mmr"}})
    verl = pytest.importorskip("reweighter.integrations.verl", exc_type=ImportError)
    with pytest.raises(ValueError, match=r"reward\.reweighter\.methd: "):
        verl.verl_options({"methd": "mmr"})
    assert verl.verl_options({"timeout_s": 30, "group_size": 4}) == ReweighterOptions()


def test_the_documented_options_table_is_the_model_and_its_refusals() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "integrations.md").read_text()
    table = text.split("<!-- options-table:", 1)[1].split("\n\n", 1)[0]
    rows = [r.split("|")[1:-1] for r in table.splitlines() if r.startswith("| `")]
    documented = {cells[0].strip().strip("`"): cells[3] for cells in rows}
    assert list(documented) == list(ReweighterOptions.model_fields)
    names = {"verl": "verl", "slime": "slime", "skyrl": "SkyRL"}
    for name, refused_by in documented.items():
        stacks = {s for s, unsupported in UNSUPPORTED.items() if name in unsupported}
        assert {s for s, shown in names.items() if shown in refused_by} == stacks, name
