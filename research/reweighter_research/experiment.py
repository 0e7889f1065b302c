"""GRPO vs DRA vs MMR on one policy, task, budget and seed set; writes OUT/results.json.

    python -m reweighter_research.experiment --config research/configs/smollm2-pickone.yaml \\
        --out experiments/run --url http://127.0.0.1:8080 --methods grpo,mmr --seeds 0 --steps 4

Every (method, seed) trains the same config with the same seed, data order and step budget; only
`reweighter.method` differs ("grpo" is the service's `none`: rewards unchanged, similarity still
measured). Each step's training accuracy (the task's checker, not the reward) and every group
are recorded (OUT/runs/<method>-<seed>.groups.jsonl). After training, the policy is evaluated
on held-out prompts: greedy accuracy, pass@k from n samples, distinct correct answers (exact
where the task has several, else embedding clusters) and within-group similarity (embeddings
from the same service). One JSON per run lands in OUT/runs/ as it finishes, so an interrupted
experiment resumes where it stopped. With GRPO and MMR runs, results.json carries the
pre-registered "decision" (decision.py, metrics.RULE); with GRPO group logs, "dra_offline".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from reweighter.client import DEFAULT_URL
from reweighter.types import Method
from reweighter_trainer.config import ConfigError, load_raw, parse
from reweighter_trainer.rewards import PICK_CHECKS

from .metrics import (
    DISTINCT_THRESHOLD,
    distinct_correct,
    mean_pairwise_similarity,
    pass_at_k,
    steps_to_target,
)

ARMS: dict[str, tuple[str, dict[str, Any]]] = {
    "grpo": (Method.NONE.value, {}),
    "dra": (Method.DRA.value, {}),
    "mmr": (Method.MMR.value, {"lambda": "adaptive", "equal_rewards": "diversify"}),
    "mmr-keep": (Method.MMR.value, {"lambda": "adaptive", "equal_rewards": "keep"}),
    "darling": (Method.DARLING.value, {}),
    "grpo-passk": (Method.NONE.value, {}),
    "grpo-2xlr": (Method.NONE.value, {}),
    "grpo-1.3xlr": (Method.NONE.value, {}),
}
"""An experiment arm -> the reweighting method and params it trains with (GRPO: rewards
unchanged). `mmr` is MMR-GRPO as the paper runs it (adaptive lambda, groups of equal rewards
diversified); `mmr-keep` is what the pickone runs called "mmr" (equal groups left alone).
`darling` (arXiv 2509.02534) takes its answer classes from the task's exact answers
(`rewards.extract_answers`, sent by every arm; only darling uses them). `grpo-passk` is GRPO
with Pass@k Training's advantages (ARM_CONFIG). `grpo-2xlr` is GRPO at twice the config's
learning rate (ARM_LR_SCALE): wordadd's positive control, an arm known to learn faster, so the
rule must be able to say "speeds up" on this setup before its other verdicts count.
`grpo-1.3xlr`: GRPO at 1.3x the learning rate, picktwo's calibrated control (control.py,
experiments/picktwo-control/PREREGISTRATION.md): a known speed-up whose expected area gain is
near delta_2x, which the rule must not refute."""
ARM_LR_SCALE: dict[str, float] = {"grpo-2xlr": 2.0, "grpo-1.3xlr": 1.3}
"""An arm's learning rate as a multiple of the shared config's (applied after its overrides)."""
PASSK_K = 4
ARM_CONFIG: dict[str, dict[str, Any]] = {
    "grpo-passk": {"reweighter": {"advantages": "pass_at_k",
                                  "advantage_params": {"k": PASSK_K, "success_threshold": 1.0}},
                   "scale_rewards": "none"},
}
"""Config beyond method and params, per arm. `grpo-passk`: the service's pass@k advantages
(arXiv 2508.10751) with k = 4 of G = 8, returned as TRL's rewards (scale_rewards none, so TRL's
own centring is a no-op on zero-mean advantages). success_threshold 1.0 is exact for the papers'
reward on pick tasks: a correct completion scores format + 2 x [0.5, 1] >= 1.0, a wrong one
format + 2 x [-0.5, 0] < 1.0 (1.0 only when empty or 400 characters long: not at 48 tokens)."""


def log(msg: str) -> None:
    print(f"[experiment {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _generate(model, tok, prompts: list[Any], n: int, greedy: bool, max_new: int, seed: int,
              temperature: float = 1.0):
    """n completions per prompt in one left-padded batch (chat template applied)."""
    import torch

    texts = [
        tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts
    ]
    tok.padding_side = "left"
    # on the model's device: after training on a GPU the trainer's model lives there
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(
            **enc,
            do_sample=not greedy,
            temperature=None if greedy else temperature,
            top_p=None if greedy else 1.0,
            top_k=None if greedy else 0,
            max_new_tokens=max_new,
            num_return_sequences=n,
            pad_token_id=tok.pad_token_id,
        )
    done = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return [done[i * n : (i + 1) * n] for i in range(len(prompts))]


def _judge(rows: list[dict]):
    """The task's checker per row: the canonical correct answer of a text, None when wrong."""
    from reweighter_trainer.rewards import correct_answer

    return lambda text, row: correct_answer(text, row["answer"], row.get("check"))


def evaluate(model, tok, rows: list[dict], *, n: int, k: int, max_new: int, seed: int,
             embed, temperature: float = 1.0) -> dict[str, Any]:
    """Held-out metrics of `model` (see the module docstring); `embed(texts) -> [N, D] array`.

    Correctness is the task's checker (rewards.correct_answer), whatever reward trained the
    policy. Distinct correct answers are counted exactly where a task has several (`pickone`:
    the distinct answers named); elsewhere they are embedding clusters of the correct samples.
    """
    judge = _judge(rows)
    exact = bool(rows) and rows[0].get("check") in PICK_CHECKS
    prompts = [r["prompt"] for r in rows]
    model.eval()
    greedy = [g[0] for g in _generate(model, tok, prompts, 1, True, max_new, seed)]
    greedy_ok = [judge(t, r) is not None for t, r in zip(greedy, rows, strict=True)]
    sampled = _generate(model, tok, prompts, n, False, max_new, seed, temperature)
    passes, distinct, sims, correct_rate = [], [], [], []
    for row, group in zip(rows, sampled, strict=True):
        answers = [judge(t, row) for t in group]
        ok = [a is not None for a in answers]
        emb = embed(group)
        passes.append(pass_at_k(n, sum(ok), k))
        distinct.append(len({a for a in answers if a}) if exact else distinct_correct(emb, ok))
        sims.append(mean_pairwise_similarity(emb))
        correct_rate.append(sum(ok) / n)
    m = len(rows)
    return {
        "accuracy": sum(greedy_ok) / m,
        "pass_at_k": sum(passes) / m,
        "sample_accuracy": sum(correct_rate) / m,
        "distinct_correct": sum(distinct) / m,
        "mean_pairwise_similarity": sum(sims) / m,
        "examples": [{"prompt": prompts[0][-1]["content"], "answer": rows[0]["answer"],
                      "greedy": greedy[0], "samples": sampled[0][:2]}],
    }


def _curve(history: list[dict], key: str) -> list[float]:
    return [float(h[key]) for h in history if key in h and "step" in h]


class StepRecorder:
    """The trainer's `on_result` hook: per step, the training accuracy (the task's checker, not
    the reward) and the distinct correct answers, and every group as a JSONL line for the
    offline checks (prompt, completions, base rewards, reweighted rewards, answers)."""

    def __init__(self, rows: list[dict], group_size: int, path: Path) -> None:
        self.by_prompt = {self.key(r["prompt"]): r for r in rows}
        self.g = group_size
        self.path = path
        self.accuracy: list[float] = []
        self.distinct: list[float] = []
        path.write_text("")

    @staticmethod
    def key(prompt: Any) -> str:
        """A prompt's question: the last message of a chat prompt, or the text itself."""
        return prompt[-1]["content"] if isinstance(prompt, list) else str(prompt)

    def __call__(self, batch: dict[str, Any]) -> None:
        judge = _judge([])
        texts, ok_all, distinct = batch["completions"], [], []
        with self.path.open("a") as f:
            for start in range(0, len(texts), self.g):
                row = self.by_prompt.get(self.key(batch["prompts"][start]))
                if row is None:  # never score a group as wrong because its prompt was not found
                    raise RuntimeError(f"StepRecorder: unknown prompt {batch['prompts'][start]!r}")
                group = texts[start : start + self.g]
                answers = [judge(t, row) for t in group]
                ok_all += [a is not None for a in answers]
                distinct.append(len({a for a in answers if a}))
                f.write(json.dumps({
                    "step": len(self.accuracy) + 1, "gold": row["answer"],
                    "completions": group, "answers": answers,
                    "base_rewards": batch["base_rewards"][start : start + self.g],
                    "rewards": batch["rewards"][start : start + self.g],
                }) + "\n")
        self.accuracy.append(sum(ok_all) / max(len(ok_all), 1))
        self.distinct.append(float(np.mean(distinct)) if distinct else 0.0)


def arm_raw(raw: dict, method: str, url: str) -> dict:
    """A copy of the shared config `raw` as arm `method` trains it: its method and params
    (ARMS), its config (ARM_CONFIG), its learning rate (ARM_LR_SCALE), the service at `url`."""
    raw = json.loads(json.dumps(raw))
    name, params = ARMS[method]
    raw["reweighter"]["method"] = name
    raw["reweighter"]["params"] = dict(params)
    raw["reweighter"]["url"] = url
    for key, value in ARM_CONFIG.get(method, {}).items():
        if isinstance(value, dict):
            raw.setdefault(key, {}).update(value)
        else:
            raw[key] = value
    if method in ARM_LR_SCALE:  # TRL's GRPOConfig default when the config names none
        raw["learning_rate"] = float(raw.get("learning_rate", 1e-6)) * ARM_LR_SCALE[method]
    return raw


def run_one(raw: dict, method: str, seed: int, steps: int, out: Path, eval_rows: list[dict],
            opts: argparse.Namespace, embed) -> dict[str, Any]:
    """Train one (method, seed), evaluate it, return its results.json entry."""
    name, params = ARMS[method]
    raw = arm_raw(raw, method, opts.url)
    raw.update(seed=seed, data_seed=seed, max_steps=steps, output_dir=str(out / f"{method}-{seed}"))
    cfg = parse(raw)
    from reweighter_trainer.data import load_dataset
    from reweighter_trainer.train import build_trainer, generation_summary

    trainer, reward = build_trainer(cfg)
    train_rows = list(load_dataset(cfg.dataset.name, cfg.dataset.split, cfg.dataset.limit))
    recorder = StepRecorder(train_rows, reward.num_generations,
                            Path(opts.out) / "runs" / f"{method}-{seed}.groups.jsonl")
    previous = reward.on_result

    def on_result(batch: dict[str, Any]) -> None:
        recorder(batch)
        if previous is not None:
            previous(batch)

    reward.on_result = on_result
    started = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - started
    history = trainer.state.log_history
    curve = _curve(history, "reweighter/base_reward")
    ev = evaluate(trainer.model, trainer.processing_class, eval_rows, n=opts.samples, k=opts.k,
                  max_new=cfg.grpo.get("max_completion_length", 64), seed=seed, embed=embed,
                  temperature=cfg.grpo.get("temperature", 1.0))
    return {
        "method": method,
        "reweighter": {"method": name, "params": params},
        "learning_rate": cfg.grpo.get("learning_rate"),
        "seed": seed,
        "steps": trainer.state.global_step,
        "reward_curve": curve,
        "steps_to_target": steps_to_target(recorder.accuracy, opts.target),
        "pass_at_k": ev["pass_at_k"],
        "accuracy": ev["accuracy"],
        "distinct_correct": ev["distinct_correct"],
        "mean_pairwise_similarity": ev["mean_pairwise_similarity"],
        "reweight_share": reward.timings.reweight_s / train_s if train_s > 0 else 0.0,
        # Beyond the schema's fields, for the decision, the plots and the write-up:
        "accuracy_curve": recorder.accuracy,
        "distinct_curve": recorder.distinct,
        "sample_accuracy": ev["sample_accuracy"],
        "similarity_curve": _curve(history, "reweighter/mean_similarity"),
        "train_wall_s": train_s,
        "generation": generation_summary(cfg, trainer),  # where, and the weight syncs
        "examples": ev["examples"],
    }


def _decide(runs: list[dict], out: Path, client, offline_ok: bool,
            opts: argparse.Namespace | None = None) -> dict[str, Any]:
    """The pre-registered decision and DRA checked offline on GRPO's groups. With a pilot
    (--pilot): the area rule (decision.AREA_RULE) over every arm against GRPO, with the pilot's
    delta_2x and power table and the commit that pre-registered it; else pickone's ratio rule
    (GRPO vs MMR)."""
    from reweighter.types import Group, ReweightRequest

    from .decision import area_decision, decision, dra_offline, group_logs, read_groups

    extra: dict[str, Any] = {}
    methods = {r["method"] for r in runs}
    if opts is not None and opts.rule == "control":
        # picktwo's positive control: its pre-registered calibration and H2 (control.py)
        from .control import control_decision

        extra["decision"] = {**control_decision(runs), "preregistered_commit": opts.preregistered}
        log(f"decision: {extra['decision']['summary']}")
    elif opts is not None and opts.rule == "wordadd":
        # delta_2x from the runs' own GRPO curves, gates, then the non-control arms
        from .decision import CONTROL, wordadd_decision

        arms = [m for m in opts.methods.split(",") if m and m not in ("grpo", CONTROL)]
        extra["decision"] = {**wordadd_decision(runs, arms=arms),
                             "preregistered_commit": opts.preregistered}
        log(f"decision: {extra['decision']['verdict_per_arm']} "
            f"({extra['decision'].get('reason') or 'gates passed'})")
    elif opts is not None and (opts.pilot or opts.rule == "area"):
        # without a pilot (a --quick check before one exists) delta_2x is NaN: nothing is
        # "refuted", and results.json says there was no pilot
        pilot = json.loads(Path(opts.pilot).read_text()) if opts.pilot else {}
        arms = [m for m in opts.methods.split(",") if m and m != "grpo"]
        extra["decision"] = {
            **area_decision(runs, pilot.get("delta_2x", float("nan")), arms=arms),
            "power": pilot.get("power"),
            "pilot": str(opts.pilot) if opts.pilot else None,
            "preregistered_commit": opts.preregistered,
        }
        log(f"decision: {extra['decision']['verdict_per_arm']}")
    elif {"grpo", "mmr"} <= methods or {"grpo", "mmr-keep"} <= methods:
        extra["decision"] = decision(runs, arm="mmr" if "mmr" in methods else "mmr-keep")
        log(f"decision: {extra['decision']['verdict']} "
            f"({extra['decision']['informative_seeds']} informative seeds)")
    logs = group_logs(out / "runs", "grpo")
    if logs and not (opts is not None and opts.no_dra_offline):
        def reweight(method: str, groups: list[dict]) -> list[list[float]]:
            req = ReweightRequest(
                groups=[Group(rewards=g["base_rewards"], completions=g["completions"])
                        for g in groups],
                method=method, advantages="grpo",
            )
            return [list(g.advantages or []) for g in client.reweight(req).groups]

        try:
            groups = [g for path in logs for g in read_groups(path)]
            extra["dra_offline"] = dra_offline(groups, reweight)
        except Exception as e:  # collect-only without a service: say so, keep the rest
            if not offline_ok:
                raise
            extra["dra_offline"] = {"error": f"{type(e).__name__}: {e}"}
    return extra


def child_argv(argv: list[str], seeds: list[int]) -> list[str]:
    """`argv` for one of --jobs' processes: the same options, its own `--seeds`, one job."""
    out, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a in ("--seeds", "--jobs") and i + 1 < len(argv):
            skip = True
            continue
        if a.startswith(("--seeds=", "--jobs=")):
            continue
        out.append(a)
    return [*out, "--seeds", ",".join(map(str, seeds)), "--jobs", "1"]


def run_jobs(argv: list[str], seeds: list[int], jobs: int) -> None:
    """Train the seeds in `jobs` processes side by side (seed i in process i mod jobs, each
    with cpu_count / jobs threads), against the same service; waits for all, raises if one
    fails. Each process resumes from OUT/runs like a single one; the caller then collects."""
    import os
    import subprocess

    threads = str(max(1, (os.cpu_count() or 1) // jobs))
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    procs = [subprocess.Popen([sys.executable, "-m", "reweighter_research.experiment",
                               *child_argv(argv, seeds[j::jobs])], env=env)
             for j in range(min(jobs, len(seeds)))]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise RuntimeError(f"--jobs: a training process failed (exit codes {codes})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="GRPO vs DRA vs MMR: train, evaluate, results.json")
    p.add_argument("--config", required=True, help="a reweighter-train YAML (the shared setup)")
    p.add_argument("--out", required=True, help="output directory (results.json, runs/)")
    p.add_argument("--url", default=DEFAULT_URL, help="the Reweighter service")
    p.add_argument("--methods", default="grpo,dra,mmr")
    p.add_argument("--seeds", default="0", help="comma-separated, e.g. 0,1,2")
    p.add_argument("--steps", type=int, default=40, help="GRPO steps per run")
    p.add_argument("--eval-prompts", type=int, default=32, help="held-out prompts")
    p.add_argument("--samples", type=int, default=16, help="samples per held-out prompt (n)")
    p.add_argument("--k", type=int, default=8, help="pass@k")
    p.add_argument("--target", type=float, default=0.5,
                   help="steps_to_target: trailing-3-step mean training accuracy to reach")
    p.add_argument("--base-eval", action="store_true", help="also evaluate the untrained policy")
    p.add_argument("--pilot", help="pilot.json (delta_2x, power): decide by the area rule")
    p.add_argument("--rule", choices=("area", "ratio", "wordadd", "control"), default="ratio",
                   help="area: decision.AREA_RULE (implied by --pilot); ratio: pickone's rule; "
                        "control: picktwo's positive control (control.py)")
    p.add_argument("--preregistered", help="the commit whose EXPERIMENTS.md holds the rule")
    p.add_argument("--no-dra-offline", action="store_true",
                   help="skip DRA's offline check on GRPO's groups (DRA is trained)")
    p.add_argument("--collect-only", action="store_true",
                   help="write results.json from the finished runs in OUT/runs, train nothing")
    p.add_argument("--jobs", type=int, default=1,
                   help="train the seeds in this many processes side by side (then collect)")
    p.add_argument("--rollout", metavar="URL",
                   help="generate on this rollout server (`bash scripts/rollout-cpu.sh`, or "
                        "`vllm serve` on a GPU; it must serve the config's policy), the "
                        "trainer's weights synced to it before every step; one run at a time")
    p.add_argument("overrides", nargs="*", help="config key=value overrides for every run")
    argv = list(sys.argv[1:] if argv is None else argv)
    opts = p.parse_args(argv)
    if opts.samples < opts.k:
        p.error(f"--samples ({opts.samples}) must be >= --k ({opts.k})")
    methods = [m.strip() for m in opts.methods.split(",") if m.strip()]
    bad = [m for m in methods if m not in ARMS]
    if bad:
        p.error(f"--methods: unknown {bad[0]!r}; choose from {sorted(ARMS)}")
    seeds = [int(s) for s in opts.seeds.split(",") if s.strip()]
    if opts.rollout:
        if opts.jobs > 1:
            p.error("--rollout: a rollout server holds one trainer's weights at a time; "
                    "use --jobs 1 (or one server per process)")
        # TRL's server mode; each run pushes its own initial weights before its first
        # generation (TRL syncs whenever the step moved, step 0 included), so the runs of an
        # experiment may share one server one after another
        opts.overrides += ["use_vllm=true", "vllm_mode=server",
                           f"vllm_server_base_url={opts.rollout}"]
    if opts.pilot and not Path(opts.pilot).exists():
        p.error(f"--pilot: no such file {opts.pilot!r} (run scripts/experiment.sh --pilot first)")
    out = Path(opts.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    try:
        raw = load_raw(opts.config, opts.overrides)
        cfg = parse(raw)
    except ConfigError as e:
        print(f"experiment: config error: {e}", file=sys.stderr)
        return 2

    from reweighter.client import ReweighterClient
    from reweighter_trainer.data import load_dataset
    from reweighter_trainer.train import model_path

    client = ReweighterClient(opts.url)
    if not opts.collect_only:
        client.wait_ready(timeout=120)

    def embed(texts: list[str]):
        return np.asarray(client.embed(list(texts)).embeddings, dtype=np.float32)

    eval_rows = list(load_dataset(cfg.dataset.name, "test", opts.eval_prompts))
    task = {
        "name": cfg.dataset.name,
        "train_prompts": cfg.dataset.limit,
        "eval_prompts": len(eval_rows),
        "samples_per_prompt": opts.samples,
        "k": opts.k,
        "target": opts.target,
        "distinct": "exact: distinct correct answers named" if eval_rows
        and eval_rows[0].get("check") in PICK_CHECKS else f"embedding clusters: leader "
        f"clustering of correct samples, all-MiniLM-L6-v2 cosine >= {DISTINCT_THRESHOLD}",
        "reward": list(cfg.rewards),
        "num_generations": cfg.grpo.get("num_generations"),
        "max_completion_length": cfg.grpo.get("max_completion_length"),
        "completions_per_step": cfg.grpo.get("per_device_train_batch_size"),
        "learning_rate": cfg.grpo.get("learning_rate"),
    }
    path = model_path(cfg)
    if opts.base_eval and not opts.collect_only and not (out / "base.json").exists():
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        log("evaluating the untrained policy")
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        if torch.cuda.is_available() and not cfg.grpo.get("use_cpu", False):
            model.to("cuda")  # where the runs train (use_cpu=false on a GPU), not the CPU
        ev = evaluate(model, AutoTokenizer.from_pretrained(path), eval_rows, n=opts.samples,
                      k=opts.k, max_new=cfg.grpo.get("max_completion_length", 64), seed=0,
                      embed=embed, temperature=cfg.grpo.get("temperature", 1.0))
        (out / "base.json").write_text(json.dumps(ev, indent=2))
        log(f"untrained: accuracy {ev['accuracy']:.3f} pass@{opts.k} {ev['pass_at_k']:.3f} "
            f"sample accuracy {ev['sample_accuracy']:.3f}")
    if opts.jobs > 1 and not opts.collect_only:
        log(f"training seeds {seeds} in {opts.jobs} processes side by side")
        run_jobs(argv, seeds, opts.jobs)
    runs = []
    plan = [(m, s) for s in seeds for m in methods]
    for i, (method, seed) in enumerate(plan, 1):
        dest = out / "runs" / f"{method}-{seed}.json"
        if dest.exists():
            log(f"[{i}/{len(plan)}] {method} seed {seed}: done before, reusing {dest}")
            runs.append(json.loads(dest.read_text()))
            continue
        if opts.collect_only:
            log(f"[{i}/{len(plan)}] {method} seed {seed}: not run, left out")
            continue
        log(f"[{i}/{len(plan)}] {method} seed {seed}: {opts.steps} steps, then held-out eval")
        t0 = time.perf_counter()
        entry = run_one(raw, method, seed, opts.steps, out / "train", eval_rows, opts, embed)
        dest.write_text(json.dumps(entry, indent=2))
        runs.append(entry)
        log(f"[{i}/{len(plan)}] {method} seed {seed}: {time.perf_counter() - t0:.0f} s, "
            f"train accuracy {entry.get('accuracy_curve')}, accuracy {entry['accuracy']:.3f}, "
            f"pass@{opts.k} {entry['pass_at_k']:.3f}, distinct {entry['distinct_correct']:.2f}")
    results: dict[str, Any] = {"model": Path(path).name, "task": task, "runs": runs}
    if (out / "base.json").exists():  # the untrained policy, the reference every run moves from
        base = json.loads((out / "base.json").read_text())
        results["untrained"] = {k: v for k, v in base.items() if k != "examples"}
    results.update(_decide(runs, out, client, opts.collect_only, opts))
    (out / "results.json").write_text(json.dumps(results, indent=2))
    log(f"wrote {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
