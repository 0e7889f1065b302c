"""A test double of the HTTP protocol TRL 1.16's trainer speaks to `vllm serve` (vLLM's own server
in dev mode), generating with a small transformers model on CPU.

It serves exactly the endpoints trl.generation.vllm_client.VLLMClient calls: /health,
/v1/models, /server_info, /get_world_size, /v1/completions (token-ID prompts, n samples per
prompt, prompt-major choices with token ids and processed logprobs), the weight-sync control
endpoints (/init_weight_transfer_engine, /start_weight_update, /update_weights,
/finish_weight_update) and /reset_prefix_cache. The weight tensors themselves travel over NCCL
in the real system, which does not exist on CPU: this fake records what it was told to expect
and does not change its model. GET /fake/calls returns every call it received, for assertions.

    python tests/fakes/fake_vllm_serve.py --model DIR --port 8000
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from typing import Any

import torch
import uvicorn
from fastapi import FastAPI, Request
from transformers import AutoModelForCausalLM, AutoTokenizer


def build_app(model_dir: str, served_name: str | None = None) -> FastAPI:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    name = served_name or model_dir
    calls: list[dict[str, Any]] = []
    lock = threading.Lock()
    app = FastAPI()

    def record(path: str, body: Any = None) -> None:
        with lock:
            calls.append({"path": path, "body": body, "t": time.time()})

    @app.get("/health")
    def health() -> dict:
        return {}

    @app.get("/v1/models")
    def models() -> dict:
        record("/v1/models")
        return {"object": "list", "data": [{"id": name, "object": "model", "root": model_dir}]}

    @app.get("/server_info")
    def server_info(config_format: str = "text") -> dict:
        record("/server_info", {"config_format": config_format})
        return {
            "vllm_config": {
                "model_config": {
                    "model": name,
                    "logprobs_mode": "processed_logprobs",
                    "max_model_len": model.config.max_position_embeddings,
                },
                "parallel_config": {"tensor_parallel_size": 1, "data_parallel_size": 1},
                "weight_transfer_config": {"backend": "nccl"},
            }
        }

    @app.get("/get_world_size")
    def world_size() -> dict:
        record("/get_world_size")
        return {"world_size": 1}

    @app.post("/v1/completions")
    async def completions(request: Request) -> dict:
        body = await request.json()
        record("/v1/completions", body)
        prompts = body["prompt"]
        if prompts and isinstance(prompts[0], int):  # a single tokenized prompt
            prompts = [prompts]
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], str)):
            texts = [prompts] if isinstance(prompts, str) else prompts
            prompts = [tokenizer(t)["input_ids"] for t in texts]
        n = int(body.get("n", 1))
        choices = []
        for ids in prompts:
            for completion, logprobs, finish in _generate(model, tokenizer, ids, n, body):
                choices.append(
                    {
                        "index": len(choices),
                        "text": tokenizer.decode(completion, skip_special_tokens=True),
                        "prompt_token_ids": list(ids),
                        "token_ids": completion,
                        "logprobs": logprobs,
                        "finish_reason": finish,
                    }
                )
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "model": name,
            "choices": choices,
        }

    for path in (
        "/init_weight_transfer_engine",
        "/start_weight_update",
        "/update_weights",
        "/finish_weight_update",
        "/reset_prefix_cache",
    ):

        async def control(request: Request, _path: str = path) -> dict:
            raw = await request.body()
            record(_path, (await request.json()) if raw else None)
            return {}

        app.post(path)(control)

    @app.get("/fake/calls")
    def fake_calls() -> list[dict[str, Any]]:
        with lock:
            return list(calls)

    return app


@torch.inference_mode()
def _generate(model, tokenizer, ids: list[int], n: int, body: dict[str, Any]):
    """n samples of one prompt: token ids (EOS kept, as vLLM does), processed logprobs."""
    temperature = float(body.get("temperature", 1.0))
    top_k = int(body.get("top_k", 0) or 0)
    kwargs: dict[str, Any] = {
        "max_new_tokens": int(body.get("max_tokens", 16)),
        "do_sample": temperature > 0,
        "num_return_sequences": n,
        "output_scores": True,
        "return_dict_in_generate": True,
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }
    if temperature > 0:
        kwargs.update(
            temperature=temperature, top_p=float(body.get("top_p", 1.0)), top_k=top_k or None
        )
    if float(body.get("repetition_penalty", 1.0)) != 1.0:
        kwargs["repetition_penalty"] = float(body["repetition_penalty"])
    input_ids = torch.tensor([ids])
    out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
    new = out.sequences[:, len(ids) :]
    # Scores are after temperature and top-k/top-p: what vLLM calls processed logprobs.
    logp = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in out.scores], dim=1)
    want_logprobs = body.get("logprobs") is not None
    for row in range(new.shape[0]):
        tokens: list[int] = []
        finish = "length"
        for tok in new[row].tolist():
            tokens.append(tok)
            if tok == tokenizer.eos_token_id:
                finish = "stop"
                break
        lps = [float(logp[row, t, tok]) for t, tok in enumerate(tokens)]
        logprobs = None
        if want_logprobs:
            names = [f"token_id:{tok}" for tok in tokens]
            logprobs = {
                "tokens": names,
                "token_logprobs": lps,
                "top_logprobs": [{nm: lp} for nm, lp in zip(names, lps, strict=True)],
                "text_offset": [0] * len(tokens),
            }
        yield tokens, logprobs, finish


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    args = p.parse_args()
    torch.manual_seed(0)
    uvicorn.run(build_app(args.model), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
