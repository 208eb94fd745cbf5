"""transformers' GPT2LMHeadModel: the baseline users know (fp32, bf16, dynamic int8, and the
founding write-up's dynamic float16), and its own speculative answer, assisted generation with the
int8 copy as the assistant (`hf-assisted`)."""

from __future__ import annotations

import copy
import queue
import threading
import time
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch import nn
from transformers import DynamicCache, GenerationConfig, GPT2LMHeadModel
from transformers.generation.stopping_criteria import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer
from transformers.pytorch_utils import Conv1D
from transformers.utils import logging as hf_logging

from ..engine import Capabilities, Engine, EngineInfo, EngineOptions, StampedToken
from ..sampling import Sampler
from ..sources.model_files import ModelFiles
from ..speculation import SpeculationStats
from .hf_options import DEFAULT_CONFIDENCE, DEFAULT_TOKENS, AssistedOptions
from .threaded_generate import tokens_from_thread
from .torch_util import count_int8_linears, logits_to_numpy, quantize_linear_fp16, quantize_linear_int8, set_threads

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "int8": torch.float32, "fp16-dynamic": torch.float32}


def conv1d_to_linear(model: nn.Module) -> int:
    """Replace HF's Conv1D (weight [in, out]) with nn.Linear (weight [out, in]).

    quantize_dynamic only knows nn.Linear and silently skips Conv1D, which would leave GPT-2's
    48 block matmuls in fp32 and quantise the lm_head alone.
    """
    replaced = 0
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, Conv1D):
                fan_in, fan_out = child.weight.shape
                linear = nn.Linear(fan_in, fan_out, bias=True, dtype=child.weight.dtype)
                linear.weight.data = child.weight.data.t().contiguous()
                linear.bias.data = child.bias.data.clone()
                setattr(parent, child_name, linear)
                replaced += 1
    return replaced


class HFEngine(Engine):
    def __init__(self, name: str, options: EngineOptions, dtype: str = "fp32") -> None:
        super().__init__(name, options)
        self.dtype = dtype
        self.model: GPT2LMHeadModel | None = None
        self._cache: DynamicCache | None = None

    def load(self, model: ModelFiles, progress) -> EngineInfo:
        config = model.gpt2_config.require_supported(self.name)
        threads = set_threads(self.options.threads)
        torch.set_grad_enabled(False)
        hf_logging.disable_progress_bar()
        hf = GPT2LMHeadModel.from_pretrained(str(model.folder), dtype=DTYPES[self.dtype]).eval()
        notes = [f"attn={hf.config._attn_implementation}"]
        if self.dtype == "int8":
            converted = conv1d_to_linear(hf)
            quantize_linear_int8(hf)
            notes.append(f"{count_int8_linears(hf)} int8 linears ({converted} Conv1D converted)")
        weight_bytes = None
        if self.dtype == "fp16-dynamic":
            converted_names = quantize_linear_fp16(hf)
            share = (config.vocab_size * config.n_embd) / (config.weight_bytes(1, 0) or 1)
            notes.append(
                f"torch.ao.quantization.quantize_dynamic({{nn.Linear}}, float16) converted "
                f"{', '.join(converted_names) or 'nothing'} ({share:.0%} of the matrix weights; "
                f"GPT-2's Conv1D blocks stay fp32); torch.ao eager quantization is deprecated "
                f"in favour of torchao"
            )
            weight_bytes = config.weight_bytes(4) - 2 * config.vocab_size * config.n_embd * len(converted_names)
        self.model = hf
        bytes_per_matrix_element = {"fp32": 4, "bf16": 2, "int8": 1, "fp16-dynamic": 4}[self.dtype]
        other = 2 if self.dtype == "bf16" else 4
        return EngineInfo(
            device="cpu",
            dtype=self.dtype,
            weight_bytes_per_token=weight_bytes or config.weight_bytes(bytes_per_matrix_element, other),
            kv_bytes_per_position=config.kv_bytes_per_position(other),  # int8: fp32 activations
            notes="; ".join(notes + [f"threads={threads}"]),
        )

    @torch.inference_mode()
    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        ids = torch.tensor([list(token_ids)], dtype=torch.long)
        # The engine owns its cache (the one the model would make itself); transformers grows it in
        # place, so the output's cache is never read. It goes in positionally: forward's second
        # parameter is the cache in every transformers 5, named past_key_values before 5.24 and
        # cache from 5.24 on (the old keyword warns there and goes in 5.40).
        self._cache = DynamicCache(config=self.model.config)
        out = self.model(ids, self._cache, use_cache=True, logits_to_keep=1)
        return logits_to_numpy(out.logits[0, -1])

    @torch.inference_mode()
    def decode(self, token_id: int) -> np.ndarray:
        ids = torch.tensor([[token_id]], dtype=torch.long)
        out = self.model(ids, self._cache, use_cache=True)
        return logits_to_numpy(out.logits[0, -1])

    @torch.inference_mode()
    def forward_logits(self, token_ids: Sequence[int]) -> np.ndarray:
        ids = torch.tensor([list(token_ids)], dtype=torch.long)
        return logits_to_numpy(self.model(input_ids=ids, use_cache=False).logits[0])

    def profiler(self):
        """torch.profiler: every aten op's self time, per prefill / decode step."""
        from ..profilers.torch_ops import TorchProfiler

        return TorchProfiler()

    def close(self) -> None:
        self.model = None
        self._cache = None


class HFAssistedEngine(HFEngine):
    """transformers' assisted generation (`generate(..., assistant_model=...)`): the fp32 model checks
    what its dynamic int8 copy (the `hf-int8` engine's way) drafts, in transformers' own loop. Tokens
    come from a streamer, several per target pass, each yielded as generate hands it over."""

    capabilities = Capabilities(own_loop=True)

    def __init__(self, name: str, options: EngineOptions) -> None:
        super().__init__(name, options, "fp32")
        self.assistant: GPT2LMHeadModel | None = None
        settings = options.settings if isinstance(options.settings, AssistedOptions) else AssistedOptions()
        self.assistant_tokens = settings.assistant_tokens or DEFAULT_TOKENS
        confidence = settings.assistant_confidence
        self.confidence = DEFAULT_CONFIDENCE if confidence is None else float(confidence)

    def load(self, model: ModelFiles, progress) -> EngineInfo:
        info = super().load(model, progress)
        hf_logging.set_verbosity_error()  # generate's advice about the assistant's processors, per run
        # No end-of-text for generate: it neither stops there nor masks it (min_new_tokens would, so the
        # next-best token came where every other engine emits end-of-text); max_new_tokens gives N.
        self.model.generation_config.eos_token_id = None
        assistant = copy.deepcopy(self.model)
        converted = conv1d_to_linear(assistant)
        quantize_linear_int8(assistant)
        self.assistant = assistant.eval()
        config = model.gpt2_config
        self._bytes = (info.weight_bytes_per_token, config.weight_bytes(1, 4))  # target, assistant
        info.notes = "; ".join(
            [
                info.notes,
                f"assistant: the int8 dynamic copy ({count_int8_linears(assistant)} int8 linears, {converted} Conv1D "
                f"converted), num_assistant_tokens {self.assistant_tokens} (constant), assistant_confidence_threshold "
                f"{self.confidence:g} (transformers adjusts it within a run; each run starts from it again)",
                "greedy: transformers compares the assistant's tokens with the model's argmax over a multi-token "
                "pass (its own kernels: logits may differ from one-token steps in the last bits)",
            ]
        )
        info.samples_natively = True
        info.multi_token_steps = True
        return info

    def stream(
        self, token_ids: Sequence[int], new_tokens: int, sampler: Sampler, cancel: threading.Event | None = None
    ) -> Iterator[StampedToken]:
        params = sampler.params
        generation = GenerationConfig(
            max_new_tokens=new_tokens,  # exactly: no end-of-text to stop at (load)
            pad_token_id=50256,
            do_sample=not params.is_greedy,
        )
        if not params.is_greedy:
            # top_k 0 is "no limit" for transformers too; None would take its default of 50
            generation.update(temperature=params.temperature, top_k=params.top_k, top_p=params.top_p)
            torch.manual_seed(params.seed)
        self.run_notes = "" if params.is_greedy else "sampled by transformers' own speculative sampling (its draws)"
        # transformers keeps the adjusted threshold on the assistant between calls: every run starts alike
        assistant_config = self.assistant.generation_config
        assistant_config.num_assistant_tokens = self.assistant_tokens
        assistant_config.num_assistant_tokens_schedule = "constant"
        assistant_config.assistant_confidence_threshold = self.confidence
        stop = threading.Event()  # the consumer has gone (cancelled, or closed the generator)
        streamer = _QueueStreamer()
        timing = _ForwardTimes(self.model, self.assistant)

        def generate() -> None:
            with torch.inference_mode():
                self.model.generate(
                    torch.tensor([list(token_ids)], dtype=torch.long),
                    generation_config=generation,
                    assistant_model=self.assistant,
                    streamer=streamer,
                    stopping_criteria=StoppingCriteriaList([_Stopped(stop, cancel)]),
                )

        tokens = tokens_from_thread(generate, streamer.tokens, None, stop, new_tokens, cancel, "hf-assisted-generate")
        count = 0
        try:
            for token in tokens:
                count += 1
                yield token
        finally:
            tokens.close()  # transformers' thread stops and is joined before its hooks go
            timing.remove()
            self.speculation = timing.stats(streamer, count, self._bytes)
            self.run_notes = "; ".join(n for n in (self.run_notes, self._short_drafts_note()) if n)

    def _short_drafts_note(self) -> str:
        """Why few tokens came per pass, where the assistant's confidence threshold cut its drafts short."""
        stats = self.speculation
        if stats is None or not stats.target_passes or self.confidence <= 0:
            return ""
        per_pass = stats.drafted / stats.target_passes
        if per_pass > 1.5:
            return ""
        return (
            f"the assistant drafted {per_pass:.2f} tokens per pass of the {self.assistant_tokens} allowed: its "
            f"confidence threshold ({self.confidence:g}) stops it at the first token it is less sure of (random "
            "weights' flat logits: nearly every one); --hf-assistant-confidence 0 turns the threshold off"
        )

    def close(self) -> None:
        super().close()
        self.assistant = None


class _QueueStreamer(BaseStreamer):
    """Each token id onto a queue as generate hands over a target pass's tokens; the prompt is skipped."""

    def __init__(self) -> None:
        self.tokens: queue.SimpleQueue = queue.SimpleQueue()
        self.passes = -1  # put() calls after the prompt's: one per target pass (the prefill's included)
        self.first = 0  # tokens of the first pass (the prefill checks the first drafts too)

    def put(self, value) -> None:
        self.passes += 1
        if self.passes == 0:
            return  # the prompt
        tokens = value.reshape(-1).tolist()
        if self.passes == 1:
            self.first = len(tokens)
        for token in tokens:  # a pass's tokens together, its step theirs: their burst is the method's
            self.tokens.put(StampedToken.now(token, self.passes - 1))

    def end(self) -> None:
        pass


class _Stopped(StoppingCriteria):
    def __init__(self, stop: threading.Event, cancel: threading.Event | None) -> None:
        self.stop, self.cancel = stop, cancel

    def __call__(self, input_ids, scores, **kwargs) -> torch.Tensor:
        done = self.stop.is_set() or (self.cancel is not None and self.cancel.is_set())
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool)


class _ForwardTimes:
    """The target's and the assistant's forward calls, counted and timed by hooks on the two modules:
    transformers' loop does not say how long each side took, or how much it drafted."""

    def __init__(self, target: nn.Module, assistant: nn.Module) -> None:
        self.calls = {"target": 0, "assistant": 0}
        self.ns = {"target": 0, "assistant": 0}
        self._began: dict[str, int] = {}
        self._at_prefill = {"target": 0, "assistant": 0}  # ns spent up to the prefill's end (not decode)
        self._drafted_at_prefill = 0
        self._hooks = []
        for role, module in (("target", target), ("assistant", assistant)):
            self._hooks.append(module.register_forward_pre_hook(self._before(role)))
            self._hooks.append(module.register_forward_hook(self._after(role)))

    def _before(self, role: str):
        def hook(module, args) -> None:
            self._began[role] = time.perf_counter_ns()

        return hook

    def _after(self, role: str):
        def hook(module, args, output) -> None:
            took = time.perf_counter_ns() - self._began.pop(role, time.perf_counter_ns())
            self.calls[role] += 1
            self.ns[role] += took
            if role == "target" and self.calls["target"] == 1:  # the prefill, with the first drafts
                self._at_prefill = dict(self.ns)
                self._drafted_at_prefill = self.calls["assistant"]

        return hook

    def remove(self) -> None:
        for hook in self._hooks:
            hook.remove()

    def stats(self, streamer: _QueueStreamer, tokens: int, weight_bytes: tuple[int, int]) -> SpeculationStats:
        """Counts over the passes after the prefill (which checks the first drafts with the prompt) and
        the tokens they made; drafted = the assistant's forward calls then, one token each."""
        passes = max(0, streamer.passes - 1)
        decoded = max(0, tokens - streamer.first)
        drafted = self.calls["assistant"] - self._drafted_at_prefill
        return SpeculationStats(
            tokens=decoded,
            target_passes=passes,
            drafted=drafted,
            accepted=max(0, min(drafted, decoded - passes)),
            draft_ns=self.ns["assistant"] - self._at_prefill["assistant"],
            verify_ns=self.ns["target"] - self._at_prefill["target"],
            bytes_read=passes * weight_bytes[0] + drafted * weight_bytes[1],
        )
