"""The ctypes side of backends/kernels/gpt2_step.c: its structs, and one sequence's state.

`NativeGPT2` owns every array the C structs point at (they must outlive each call), the KV
cache and the position; `forward` runs T tokens through gpt2_forward in one call.
"""

from __future__ import annotations

import ctypes
from dataclasses import InitVar, dataclass, field
from enum import Enum

import numpy as np

from ...gpt2_config import GPT2Config
from ...kernels import native
from ...machine.isa import Isa
from ...profilers.categories import Category
from .weights import StoredMatrix, WeightType, store

# gpt2_step.c's timers in its T_* order, each with the profile breakdown's category.
TIMERS = (
    ("matmul", Category.MATMUL),
    ("attention", Category.ATTENTION),
    ("kv_write", Category.KV_CACHE),
    ("norm_act", Category.NORM_ACTIVATION),
    ("other", Category.OTHER_KERNELS),
)

_P = ctypes.c_void_p


class KvCache(str, Enum):
    """How the step keeps its keys and values: float32, or int8 rows of a head with a float32 scale each."""

    F32 = "fp32"
    I8 = "int8"


class Mat(ctypes.Structure):
    _fields_ = [("w", _P), ("scale", _P), ("bias", _P)]


class Layer(ctypes.Structure):
    _fields_ = [
        ("ln1_w", _P),
        ("ln1_b", _P),
        ("ln2_w", _P),
        ("ln2_b", _P),
        ("qkv", Mat),
        ("proj", Mat),
        ("fc", Mat),
        ("fc2", Mat),
    ]


class Model(ctypes.Structure):
    _fields_ = [
        ("n_layer", ctypes.c_int64),
        ("n_head", ctypes.c_int64),
        ("n_embd", ctypes.c_int64),
        ("n_inner", ctypes.c_int64),
        ("vocab", ctypes.c_int64),
        ("max_seq", ctypes.c_int64),
        ("wtype", ctypes.c_int64),
        ("eps", ctypes.c_float),
        ("wpe", _P),
        ("lnf_w", _P),
        ("lnf_b", _P),
        ("lm_head", Mat),
        ("layers", ctypes.POINTER(Layer)),
        ("k_cache", _P),
        ("v_cache", _P),
        ("timers", _P),
        ("kq_cache", _P),
        ("vq_cache", _P),
        ("k_scale", _P),
        ("v_scale", _P),
        ("scratch", _P),
        ("scratch_bytes", ctypes.c_int64),
    ]


def _ptr(array: np.ndarray | None) -> int | None:
    return None if array is None else array.ctypes.data


def _own_f32(array: np.ndarray) -> np.ndarray:
    """A float32 copy in this process's memory: nothing keeps the weight file mapped after load."""
    return np.array(array, dtype=np.float32, order="C", copy=True)


def _mat(m: StoredMatrix) -> Mat:
    return Mat(_ptr(m.data), _ptr(m.scale), _ptr(m.bias))


STRUCTS = (Mat, Layer, Model)  # each named as its typedef in gpt2_step.c


class LayoutMismatch(RuntimeError):
    """The ctypes structs here and the C structs of the built step differ: calling it would read the
    wrong memory."""


def library(isa: Isa = Isa.AUTO) -> ctypes.CDLL:
    """The compiled step at an instruction-set level (AUTO: the best this CPU executes; IsaUnavailable
    for one it cannot; KernelUnavailable without a C compiler; LayoutMismatch if its structs differ)."""
    return bind(native.load("gpt2_step", isa))


def bind_team(lib: ctypes.CDLL) -> bool:
    """Bind the step's OpenMP threads one to a CPU where the rule says so (kernels.native.bind_team)."""
    return native.bind_team(lib.gpt2_threads(), lib.gpt2_bind_threads)


def bind(lib: ctypes.CDLL, structs: tuple[type[ctypes.Structure], ...] = STRUCTS) -> ctypes.CDLL:
    """Declare the step's functions on a loaded build of gpt2_step.c, once its structs are checked."""
    lib.gpt2_layout.restype = ctypes.c_char_p
    check_layout(lib.gpt2_layout().decode(), structs)
    lib.gpt2_forward.restype = ctypes.c_int
    lib.gpt2_forward.argtypes = [
        ctypes.POINTER(Model),
        _P,
        ctypes.c_int64,
        ctypes.c_int64,
        _P,
        ctypes.c_int,
        ctypes.c_int,
    ]
    lib.gpt2_set_threads.argtypes = [ctypes.c_int]
    lib.gpt2_scratch_bytes.restype = ctypes.c_int64
    lib.gpt2_scratch_bytes.argtypes = [ctypes.POINTER(Model), ctypes.c_int64]
    lib.gpt2_bind_threads.restype = ctypes.c_int
    lib.gpt2_bind_threads.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    lib.gpt2_threads.restype = ctypes.c_int
    lib.gpt2_paths.restype = ctypes.c_char_p
    lib.gpt2_paths.argtypes = [ctypes.c_int]
    lib.gpt2_prefill_arithmetic.restype = ctypes.c_int
    lib.gpt2_prefill_arithmetic.argtypes = [ctypes.c_int]
    lib.gpt2_set_amx_min_tokens.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.gpt2_amx_min_tokens.restype = ctypes.c_int
    lib.gpt2_amx_min_tokens.argtypes = [ctypes.c_int]
    lib.gpt2_amx_tiles.restype = ctypes.c_char_p
    lib.gpt2_matmul.restype = ctypes.c_int
    lib.gpt2_matmul.argtypes = [ctypes.POINTER(Mat), ctypes.c_int64, _P, _P] + [ctypes.c_int64] * 3
    return lib


def layout(structs: tuple[type[ctypes.Structure], ...]) -> dict[str, str]:
    """{"Mat": "24", "Mat.w": "0:8", ...}: each struct's size, each field's offset:size, as
    gpt2_layout() writes the C ones."""
    out: dict[str, str] = {}
    for struct in structs:
        out[struct.__name__] = str(ctypes.sizeof(struct))
        for field_name, *_ in struct._fields_:
            field = getattr(struct, field_name)
            out[f"{struct.__name__}.{field_name}"] = f"{field.offset}:{field.size}"
    return out


def check_layout(c_layout: str, structs: tuple[type[ctypes.Structure], ...]) -> None:
    """Raise LayoutMismatch unless every struct's size and every field's offset and size agree with C's."""
    theirs = dict(item.split("=", 1) for item in c_layout.split(";") if item)
    ours = layout(structs)
    differ = [
        f"{key}: C {theirs.get(key, 'absent')}, ctypes {ours.get(key, 'absent')}"
        for key in sorted(theirs.keys() | ours.keys())
        if theirs.get(key) != ours.get(key)
    ]
    if differ:
        raise LayoutMismatch(
            "the native step's ctypes structs do not match gpt2_step.c's (size, offset:size): " + "; ".join(differ)
        )


SCALE = ".scale"  # an int8 matrix's row scales, stored beside it
LM_HEAD = "lm_head"


def _layer_matrices(block: dict) -> list[tuple[str, dict]]:
    """A layer's four matrices, named as stored_arrays names them (HF Conv1D leaves: [in, out])."""
    return [
        ("qkv", block["attn"]["c_attn"]),
        ("proj", block["attn"]["c_proj"]),
        ("fc", block["mlp"]["c_fc"]),
        ("fc2", block["mlp"]["c_proj"]),
    ]


def stored_arrays(p: dict, wtype: WeightType) -> dict[str, np.ndarray]:
    """Every matrix of the nested float32 params at `wtype`, [out, in] (Conv1D's transposed), in new
    arrays: what the step reads and what the layout cache keeps (`h.<i>.<qkv|proj|fc|fc2>`, `lm_head`,
    and `<name>.scale` for int8's row scales)."""
    out: dict[str, np.ndarray] = {}
    named = [
        (f"h.{i}.{name}", leaf["w"].T) for i, block in enumerate(p["blocks"]) for name, leaf in _layer_matrices(block)
    ]
    for name, w_out_in in named + [(LM_HEAD, p["wte"])]:
        matrix = store(w_out_in, None, wtype)
        out[name] = matrix.data
        if matrix.scale is not None:
            out[f"{name}{SCALE}"] = matrix.scale
    return out


@dataclass
class NativeGPT2:
    """Weights at one stored type (from the nested float32 params of numpy_runtime.model.nest_params,
    copied: once built, it holds no view of the weight file), one sequence's KV cache and position."""

    params: InitVar[dict]
    config: GPT2Config
    wtype: WeightType
    lib: ctypes.CDLL = field(default_factory=library)
    pos: int = 0
    timers: np.ndarray | None = None  # int64 [5] ns per category while a profile reads them
    kv: KvCache = KvCache.F32
    # the matrices already at the stored type (stored_arrays' names, e.g. from the layout cache); None: store now
    stored: InitVar[dict[str, np.ndarray] | None] = None

    def __post_init__(self, p: dict, stored: dict[str, np.ndarray] | None) -> None:
        c = self.config
        arrays = stored if stored is not None else stored_arrays(p, self.wtype)
        keep: list = []  # every array a struct points at

        def vec(a: np.ndarray) -> np.ndarray:
            keep.append(_own_f32(a))
            return keep[-1]

        def matrix(name: str, bias: np.ndarray | None) -> StoredMatrix:
            keep.append(StoredMatrix(arrays[name], arrays.get(f"{name}{SCALE}"), bias))
            return keep[-1]

        self.layers = (Layer * c.n_layer)()
        for index, block in enumerate(p["blocks"]):
            layer = self.layers[index]
            layer.ln1_w, layer.ln1_b = _ptr(vec(block["ln_1"]["w"])), _ptr(vec(block["ln_1"]["b"]))
            layer.ln2_w, layer.ln2_b = _ptr(vec(block["ln_2"]["w"])), _ptr(vec(block["ln_2"]["b"]))
            for name, leaf in _layer_matrices(block):  # named as the Layer struct's fields
                setattr(layer, name, _mat(matrix(f"h.{index}.{name}", vec(leaf["b"]))))
        # tied: [vocab, d] is already [out, in]; the step reads its rows for the embedding too
        self.lm_head = StoredMatrix(arrays[LM_HEAD], arrays.get(f"{LM_HEAD}{SCALE}"), None)
        shape = (c.n_layer, c.n_head, c.n_positions, c.head_dim)
        # zero pages until written; one cache or the other
        f32 = self.kv == KvCache.F32
        self.k_cache, self.v_cache = (np.zeros(shape if f32 else 0, np.float32) for _ in range(2))
        self.kq_cache, self.vq_cache = (np.zeros(0 if f32 else shape, np.int8) for _ in range(2))
        self.k_scale, self.v_scale = (np.zeros(0 if f32 else shape[:3], np.float32) for _ in range(2))
        self.matrix_bytes = sum(m.nbytes for m in keep if isinstance(m, StoredMatrix)) + self.lm_head.nbytes
        self._keep = keep
        self.model = Model(
            c.n_layer,
            c.n_head,
            c.n_embd,
            c.n_inner,
            c.vocab_size,
            c.n_positions,
            int(self.wtype),
            c.layer_norm_epsilon,
            _ptr(vec(p["wpe"])),
            _ptr(vec(p["ln_f"]["w"])),
            _ptr(vec(p["ln_f"]["b"])),
            _mat(self.lm_head),
            self.layers,
            _ptr(self.k_cache) if f32 else None,
            _ptr(self.v_cache) if f32 else None,
            None,
            None if f32 else _ptr(self.kq_cache),
            None if f32 else _ptr(self.vq_cache),
            None if f32 else _ptr(self.k_scale),
            None if f32 else _ptr(self.v_scale),
        )
        self._forward, self._model_ref = self.lib.gpt2_forward, ctypes.byref(self.model)
        # The step's scratch for the whole context, kept: a step reuses the pages the last one mapped
        # (zero pages until written). A team grown since takes a block of its own per step.
        self._scratch = np.zeros(self.lib.gpt2_scratch_bytes(self._model_ref, c.n_positions), np.uint8)
        self.model.scratch, self.model.scratch_bytes = _ptr(self._scratch), self._scratch.nbytes
        self._one = np.zeros(1, np.int32)  # decode's token
        self._one_address = _ptr(self._one)

    @property
    def kv_bytes_per_position(self) -> int:
        """What one decode step reads per cached position: every layer's key and value rows, and an
        8-bit cache's scale per head and row."""
        c = self.config
        if self.kv == KvCache.F32:
            return c.kv_bytes_per_position(4)
        return c.kv_bytes_per_position(1) + c.n_layer * 2 * c.n_head * 4

    def set_timers(self, timers: np.ndarray | None) -> None:
        self.timers = timers
        self.model.timers = _ptr(timers)

    def forward(self, ids: np.ndarray, pos: int, all_logits: bool, exact: bool = False) -> np.ndarray:
        """Token ids [T] at positions [pos, pos+T) -> logits [T, V] or [V] (the last position).
        `exact`: each position's logits are the ones a one-token decode there gives, bit for bit,
        with the weights read once for all T (a speculative verify pass); otherwise T > 1 takes
        prefill's products. The KV cache is written at [pos, pos+T); `pos` is not moved."""
        ids = np.ascontiguousarray(ids, dtype=np.int32)
        if ids.size and (ids.min() < 0 or ids.max() >= self.config.vocab_size):
            raise ValueError(f"token id out of range 0..{self.config.vocab_size - 1}")
        if not 0 < len(ids) <= self.config.n_positions - pos:
            raise ValueError(f"{pos + len(ids)} tokens; this model takes 1 to {self.config.n_positions}")
        out = np.empty((len(ids), self.config.vocab_size) if all_logits else self.config.vocab_size, np.float32)
        return self._call(_ptr(ids), len(ids), pos, out, all_logits, exact)

    def _call(
        self, ids_address: int, count: int, pos: int, out: np.ndarray, all_logits: bool, exact: bool = False
    ) -> np.ndarray:
        if self._forward(self._model_ref, ids_address, count, pos, out.ctypes.data, int(all_logits), int(exact)):
            raise MemoryError("the native step could not allocate its scratch memory")
        return out

    def prefill(self, ids: np.ndarray) -> np.ndarray:  # [T] -> [V]
        self.pos = 0
        logits = self.forward(ids, 0, False)
        self.pos = len(ids)
        return logits

    def decode(self, token: int) -> np.ndarray:  # -> [V]
        """forward() for one token with less Python around the call (it is paid once per token)."""
        if self.pos >= self.config.n_positions:
            raise ValueError(f"the context is full ({self.config.n_positions} tokens)")
        if not 0 <= token < self.config.vocab_size:
            raise ValueError(f"token id out of range 0..{self.config.vocab_size - 1}")
        self._one[0] = token
        logits = self._call(self._one_address, 1, self.pos, np.empty(self.config.vocab_size, np.float32), False)
        self.pos += 1
        return logits
