#!/usr/bin/env python3
"""Python frames of call stacks at allocation (profiler/stack_capture.h), read in the calling
thread through the interpreter's C API found at run time. The capture runs inside a foreign call
made through ctypes.CDLL, which releases the GIL as PyTorch does around its allocations, and
through ctypes.PyDLL, which keeps it. usage: python_stack_test.py LIBPATH"""
import ctypes
import sys
import threading

LIB = sys.argv[1]
HERE = __file__


def capture(dll, mode=0):
    buf = ctypes.create_string_buffer(1 << 16)
    dll.moeprof_test_capture.restype = ctypes.c_int
    rc = dll.moeprof_test_capture(buf, len(buf), mode)
    assert rc > 0, f"capture failed ({rc})"
    return [line.split("|") for line in buf.value.decode().splitlines()]


def inner(dll, mode=0):
    return capture(dll, mode)  # line A


def outer(dll, mode=0):
    return inner(dll, mode)


def two_lines(dll):
    first = capture(dll)  # line B
    second = capture(dll)  # line C
    return first, second


def line_of(marker):
    for i, text in enumerate(open(HERE, encoding="utf-8"), 1):
        if marker in text and "def " not in text:
            return i
    raise AssertionError(marker)


failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


for name, dll in (("CDLL (GIL released)", ctypes.CDLL(LIB)), ("PyDLL (GIL held)", ctypes.PyDLL(LIB))):
    frames = outer(dll)
    py = [f for f in frames if f[0] == "py"]
    check(len(py) >= 3, f"{name}: at least 3 Python frames, got {frames}")
    if len(py) >= 3:
        # Innermost first: capture (in capture()), inner at line A, outer at its call of inner.
        check(py[0][1] == "capture" and py[0][2] == HERE, f"{name}: innermost frame {py[0]}")
        check(py[1][1] == "inner" and int(py[1][3]) == line_of("# line A"), f"{name}: inner frame {py[1]}")
        check(py[2][1] == "outer" and int(py[2][3]) == line_of("return inner(dll, mode)"), f"{name}: outer frame {py[2]}")
        check(py[-1][1] == "<module>", f"{name}: outermost frame {py[-1]}")
    # One code object, two instructions: two lines (frames are cached by code and offset), and
    # the same again on a second pass through the cache.
    for _ in range(2):
        b, c = two_lines(dll)
        check([f[1] for f in b[:2]] == ["capture", "two_lines"] and int(b[1][3]) == line_of("# line B"), f"{name}: line B {b[:2]}")
        check([f[1] for f in c[:2]] == ["capture", "two_lines"] and int(c[1][3]) == line_of("# line C"), f"{name}: line C {c[:2]}")
    # Both: Python frames first, then native ones (libffi / ctypes / the interpreter).
    both = outer(dll, 1)
    kinds = [f[0] for f in both]
    check("py" in kinds and "native" in kinds and kinds.index("native") > kinds.index("py"), f"{name}: both: {kinds}")

# A Python thread: its own frames, not the main thread's.
result = {}


def worker():
    result["frames"] = outer(ctypes.CDLL(LIB))


t = threading.Thread(target=worker)
t.start()
t.join()
py = [f for f in result["frames"] if f[0] == "py"]
check(len(py) >= 3 and py[2][1] == "outer", f"thread: {py[:4]}")
check(any(f[1].endswith("worker") for f in py), f"thread: the worker frame: {py}")
check(not any(f[1] == "<module>" for f in py), f"thread: no main-thread frame: {py}")

if failures:
    for f in failures:
        print("FAIL:", f)
    sys.exit(1)
print(f"python_stack_test: ok (Python {sys.version.split()[0]})")
