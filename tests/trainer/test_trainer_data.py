"""The shipped dataset, the base rewards and the tiny model: hand-checked values."""

from __future__ import annotations

import re

from reweighter_trainer.data import generate_arith, load_arith_rows, load_dataset
from reweighter_trainer.rewards import accuracy_reward, format_reward


def test_shipped_arith_is_the_deterministic_generator_output():
    assert load_arith_rows() == generate_arith()


def test_arith_answers_are_right():
    for row in load_arith_rows():
        a, op, b = re.match(r"What is (\d+) ([-+*]) (\d+)\?", row["prompt"]).groups()
        a, b = int(a), int(b)
        expected = {"+": a + b, "-": a - b, "*": a * b}[op]
        assert row["answer"] == str(expected)


def test_load_dataset_columns_and_limit():
    ds = load_dataset("arith", limit=5)
    assert ds.column_names == ["prompt", "answer"] and len(ds) == 5


def test_accuracy_reads_only_the_answer_tag():
    completions = [
        "<answer>19</answer>",
        "<think>x</think><answer>19.0</answer>",
        "19",  # right number, no tag: no credit
        "<answer>20</answer>",
        "<answer>1</answer> then <answer>19</answer>",  # the last tag counts
        [{"role": "assistant", "content": "<answer>19</answer>"}],  # conversational
    ]
    assert accuracy_reward(None, completions, answer=["19"] * 6) == [1, 1, 0, 0, 1, 1]


def test_format_reward_levels():
    completions = [
        "<think>a</think><answer>1</answer>",
        " <think>a</think>\n<answer>2</answer> ",
        "<answer>1</answer>",
        "<think>a</think>",
        "<think>a</think><answer>1</answer>x",
    ]
    assert format_reward(None, completions) == [1.0, 1.0, 0.5, 0.0, 0.5]


def test_tiny_model_is_a_local_qwen2_with_its_own_tokenizer(tiny_model):
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(tiny_model)
    tok = AutoTokenizer.from_pretrained(tiny_model)
    assert config.model_type == "qwen2" and config.vocab_size == len(tok)
    text = "What is 3 + 4? <answer>7</answer>"
    assert tok.decode(tok(text)["input_ids"]) == text
    assert tok.eos_token == "<|endoftext|>" and tok.pad_token_id != tok.eos_token_id
