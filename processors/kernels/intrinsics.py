"""LLVM intrinsics for the numba kernels: a cache prefetch and the CPU's cycle counter.

A kernel that does main-pass work and profiling in one call (to save a call) must say how long
each part took, so that the run-time breakdown (Table 2) stays a measurement: it reads
:func:`cycles`, which :func:`ns_per_cycle` converts.

Kept in one place so that every kernel asks for them the same way (one definition of each
intrinsic's LLVM name and arguments).
"""

from __future__ import annotations

import time

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def prefetch(typingctx, arr, idx):  # type: ignore[no-untyped-def]
    """Ask the CPU to start loading ``arr[idx]`` (for a 2-D array: row ``idx``) into cache
    (llvm.prefetch: no fault, no wait, no effect on results). Kernels bound by memory latency
    use it to overlap the misses that their probes would take one by one."""

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        zero = context.get_constant(types.intp, 0)
        index = [args[1]] + [zero] * (aryty.ndim - 1)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, index, wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        # read, high locality, data cache
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(arr, idx), codegen


@intrinsic
def _readcyclecounter(typingctx):  # type: ignore[no-untyped-def]
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        fnty = ir.FunctionType(ir.IntType(64), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.readcyclecounter")
        return builder.call(fn, [])

    return types.uint64(), codegen


@njit(cache=True)
def cycles():  # type: ignore[no-untyped-def]
    """The CPU's cycle counter (x86: the constant-rate TSC), as int64; 0 where there is none."""
    return np.int64(_readcyclecounter())


_NS_PER_CYCLE: list[float] = []


def ns_per_cycle() -> float:
    """Nanoseconds per :func:`cycles` tick, measured once per process over ~2 ms (0.0 when
    the counter does not run: callers then fall back to splitting by evaluations)."""
    if not _NS_PER_CYCLE:
        c0, t0 = cycles(), time.perf_counter_ns()
        while time.perf_counter_ns() - t0 < 2_000_000:
            pass
        c1, t1 = cycles(), time.perf_counter_ns()
        _NS_PER_CYCLE.append((t1 - t0) / (c1 - c0) if c1 > c0 else 0.0)
    return _NS_PER_CYCLE[0]
