"""The bodies the server answers with: a whole completion, a stream's chunks, usage, the model list."""

from __future__ import annotations

from dataclasses import dataclass

from ..engines.remote_options import OWNER
from .choice_text import Logprobs
from .protocol import ModelInfo


@dataclass
class Choice:
    """One answered choice, as it is assembled."""

    index: int
    text: str = ""
    logprobs: Logprobs | None = None
    token_ids: list[int] | None = None
    finish_reason: str | None = None
    tokens: int = 0  # completion tokens it counts in the usage
    logprob_sum: float = 0.0  # best_of's ranking

    def body(self) -> dict:
        choice: dict = {
            "index": self.index,
            "text": self.text,
            "logprobs": None if self.logprobs is None else self.logprobs.body(),
            "finish_reason": self.finish_reason,
        }
        if self.token_ids is not None:
            choice["token_ids"] = self.token_ids
        return choice


def completion_body(
    request_id: str, model: str, created: int, choices: list[Choice], prompt_tokens: int, completion_tokens: int
) -> dict:
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [c.body() for c in sorted(choices, key=lambda c: c.index)],
        "usage": usage(prompt_tokens, completion_tokens),
    }


def chunk_body(request_id: str, model: str, created: int, choice: Choice) -> dict:
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [choice.body()],
    }


def usage_chunk(request_id: str, model: str, created: int, prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(prompt_tokens, completion_tokens),
    }


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def models_body(model: ModelInfo, root: str, created: int) -> dict:
    return {
        "object": "list",
        "data": [
            {
                "id": model.name,
                "object": "model",
                "created": created,
                "owned_by": OWNER,
                "root": root,
                "max_model_len": model.context,
            }
        ],
    }
