"""What crosses between the grading process and a student's kernel, declared once.

Plain data (tensors, numbers, strings, sizes, dtypes, devices, and tuples, lists and dicts of them nested at
most MAX_DEPTH deep) is packed into builtins only, so a pickle of it names no class; anything else travels as
a token standing for an opaque object. Also here: the traceback filter that keeps only the student's frames, and
the IPython attributes tamper detection watches, and how each side seeds torch before a call into the student's
code. Refusing forbidden calls and tracing a call are grader/guard.py's.

Dependency-free (torch and the standard library): the grading process imports it, and the bridge installs
the kernel's copy from this file's text before any student code runs (as it installs the scenarios), so a
notebook cannot have changed the copy the kernel side uses. `grader.scenario.to_data` is a round trip
through it, so a notebook sees exactly what grading would.
"""
import dis
import linecache
import os
import traceback

import torch

MAX_DEPTH = 8  # containers nested deeper than this are not data
# A reply's budget, read by the grading process before it decodes anything (bridge.load_reply, measure). The
# largest legitimate reply of any check is far below each (docs/measurements.md, "reply sizes").
MAX_REPLY_BYTES = 64 * 2**20        # the reply's file, tensors' bytes included
MAX_REPLY_ITEMS = 200_000           # values and containers, a shared one counted every time it is reached
MAX_REPLY_ELEMENTS = 2**26          # tensor elements, summed over every tensor the reply describes
MAX_REPLY_DEPTH = 64                # nesting, far past a packed value's (MAX_DEPTH) and the reply's own envelope
PLAIN = (type(None), bool, int, float, str, bytes)  # what goes into the pickle as itself
SHELL_ATTRS = ("showtraceback", "_showtraceback", "showsyntaxerror")  # how IPython shows an error
_DATA_TYPES = "tensors, numbers, strings, sizes, dtypes, devices, and tuples, lists and dicts of them"


def seed(n: int) -> None:
    """torch.manual_seed(n) for the CPU and the GPUs in use, without what torch.manual_seed records for a GPU not
    started yet (a formatted stack per device: milliseconds, at every one of a notebook's hundreds of calls)."""
    torch.random.default_generator.manual_seed(n)
    if torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(n)
    if torch.backends.mps.is_available():
        torch.mps.manual_seed(n)


def opaque_text(x):
    """How an opaque value reads in a message: its repr, cut short, or its type when repr itself fails."""
    try:
        return repr(x)[:200]
    except BaseException:
        return f"<{type(x).__name__}>"


def pack(x, token, storages, opaque=None, depth=0):
    """Plain data as is; a tensor as a marker naming its storage (so views of one storage stay views of it,
    whatever their dtypes); sizes, dtypes, devices and complex numbers as markers; anything else as a
    token standing for an opaque object (or a TypeError when `opaque` is None). The result pickles with
    builtins only: no class is ever named."""
    t = type(x)
    if t in PLAIN:
        return x
    if t is torch.Size:
        return (token + "size", tuple(int(v) for v in x))
    if t is torch.dtype:
        return (token + "dtype", str(x).removeprefix("torch."))
    if t is torch.device:
        return (token + "device", str(x))
    if t is complex:
        return (token + "complex", x.real, x.imag)
    if t in (torch.Tensor, torch.nn.Parameter) and x.layout == torch.strided and x.device.type == "cpu":
        storage = x.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes())
        if key not in storages:
            storages[key] = (len(storages), torch.empty(0, dtype=torch.uint8).set_(storage))
        return (token + "tensor", storages[key][0], str(x.dtype).removeprefix("torch."), tuple(x.shape),
                tuple(x.stride()), x.storage_offset(), bool(x.requires_grad))
    if depth < MAX_DEPTH and t in (tuple, list):
        return t(pack(v, token, storages, opaque, depth + 1) for v in x)
    if depth < MAX_DEPTH and t is dict and all(type(k) in (str, int) for k in x):
        return {k: pack(v, token, storages, opaque, depth + 1) for k, v in x.items()}
    if opaque is None:
        deep = f" nested more than {MAX_DEPTH} levels deep" if t in (tuple, list, dict) else ""
        raise TypeError(f"cannot send a {t.__name__}{deep} to the kernel: only plain data crosses ({_DATA_TYPES})")
    key = f"{token}{len(opaque)}"
    opaque[key] = (t.__module__ if t.__module__ != "builtins" else "", t.__qualname__, opaque_text(x))
    return key


class TooLarge(ValueError):
    """A reply past its budget: the student's code returned (or left in its arguments) more than any check needs."""


def measure(x, items=MAX_REPLY_ITEMS, nbytes=MAX_REPLY_BYTES, elements=MAX_REPLY_ELEMENTS):
    """Walk a decoded reply as unpack would, without building anything, and raise TooLarge as soon as it holds
    more than `items` values, `nbytes` bytes of strings or `elements` tensor elements (shared references count
    each time they are reached, as unpack would copy them) or nests deeper than MAX_REPLY_DEPTH (decoding recurses).
    Bounded: it stops at the first value over budget, so a reply built to be huge costs no more than one at the limit."""
    seen = size = numel = 0
    stack = [(x, 0)]
    while stack:
        v, depth = stack.pop()
        seen += 1
        if seen > items:
            raise TooLarge(f"more than {items:,} values")
        t = type(v)
        if t in (str, bytes, bytearray):
            size += len(v)
            if size > nbytes:
                raise TooLarge(f"more than {nbytes / 2**20:g} MiB")
        elif t in (tuple, list, dict):
            if depth > MAX_REPLY_DEPTH:
                raise TooLarge(f"containers nested more than {MAX_REPLY_DEPTH} deep")
            if t is tuple and len(v) == 7 and type(v[0]) is str and v[0].endswith("tensor") and type(v[3]) is tuple:
                count = 1
                for d in v[3]:
                    count *= d if type(d) is int and d >= 0 else 0
                numel += count
                if numel > elements:
                    raise TooLarge(f"tensors of more than {elements:,} elements")
            children = [*v.keys(), *v.values()] if t is dict else v
            stack.extend((e, depth + 1) for e in children)
    return seen


def storage_list(storages):
    """The storages pack met, in order, as bytes."""
    return [u8.numpy().tobytes() for _, u8 in sorted(storages.values(), key=lambda v: v[0])]


def storages_from(blobs):
    """One uint8 tensor per storage, for unpack to make every tensor of that storage a view of it."""
    return [torch.frombuffer(bytearray(b), dtype=torch.uint8) if b else torch.empty(0, dtype=torch.uint8)
            for b in blobs]


def unpack(x, token, storages, student=None):
    """The inverse of pack (opaque tokens stay strings for the receiver to handle); `student(name)` resolves
    a reference to one of the notebook's objects (a scenario's argument)."""
    t = type(x)
    if t is tuple and x and type(x[0]) is str and x[0].startswith(token):
        kind = x[0][len(token):]
        if kind == "student" and len(x) == 2 and student is not None:
            return student(x[1])
        if kind == "tensor" and len(x) == 7:
            _, index, dtype, shape, stride, offset, grad = x
            dt = getattr(torch, dtype)
            if not isinstance(dt, torch.dtype):
                raise ValueError(f"not a dtype: {dtype}")
            y = torch.empty(0, dtype=dt).set_(storages[index].untyped_storage(), offset, shape, stride)
            return y.requires_grad_() if grad and y.is_floating_point() else y
        if kind == "size" and len(x) == 2:
            return torch.Size(x[1])
        if kind == "dtype" and len(x) == 2 and isinstance(getattr(torch, x[1], None), torch.dtype):
            return getattr(torch, x[1])
        if kind == "device" and len(x) == 2:
            return torch.device(x[1])
        if kind == "complex" and len(x) == 3:
            return complex(x[1], x[2])
    if t in (tuple, list):
        return t(unpack(v, token, storages, student) for v in x)
    if t is dict:
        return {k: unpack(v, token, storages, student) for k, v in x.items()}
    return x


_CALLING = {op for name, op in dis.opmap.items() if name.startswith(("CALL", "PRECALL"))}


def raised_by_own_code(tb, skip_dirs, skip_files=()):
    """Whether an exception came from the student's own code (the innermost frame), as a stub's `raise
    NotImplementedError` does, and not out of a library the code called: torch raises NotImplementedError too (a
    meta tensor has no data to copy), from a C method, so the innermost frame is the student's line, but the
    instruction there is a call."""
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    if code.co_filename.startswith(tuple(skip_files)) or \
            os.path.abspath(code.co_filename).startswith(tuple(skip_dirs)):
        return False
    return not (0 <= tb.tb_lasti < len(code.co_code) and code.co_code[tb.tb_lasti] in _CALLING)


def student_frames(tb, skip_dirs, skip_files=(), limit=3):
    """The last frames of a traceback that are the student's own code (not in `skip_dirs`, not one of the
    grader's own compiled texts in `skip_files`), without file paths."""
    lines = []
    for fs in traceback.extract_tb(tb):
        if fs.filename.startswith(tuple(skip_files)) or os.path.abspath(fs.filename).startswith(tuple(skip_dirs)):
            continue
        code = (fs.line or linecache.getline(fs.filename, fs.lineno)).strip()
        lines.append(f"in {fs.name}, line {fs.lineno}: {code}" if code else f"in {fs.name}, line {fs.lineno}")
    return " | ".join(lines[-limit:])
