"""The names a user's tensor or axis must not keep in generated C, C++ and CUDA, and what it
becomes instead.

A custom computation names its tensors and axes, and the generated kernel, the artifact's header
and the CUDA launcher declare those names as C identifiers. Some names cannot be declared there:

- a keyword of C or C++ (`this`, `class`, `bool`): the header is also compiled as C++;
- a macro of a standard header the kernel or a user's program includes before the header
  (`NAN`, `EOF`, `INT8_MAX`, `M_PI`, `stdout`, and `linux` and `unix`, which gcc predefines);
- a function or type the generated code itself uses (`expf`, `memcpy`, `int64_t`; in CUDA
  `threadIdx`, and `grid`, `block` and `stream` in the launcher).

Such a name is written ``tf_u_<name>``: users' names never start with ``tf_``
(``expr.check_identifier``), so it takes no other name. Writing a name longer costs nothing,
so the rules take whole families that C and POSIX reserve instead of a list of today's macros;
``tests/test_c_names.py`` checks them against every macro gcc and g++ define for the standard
headers.
"""

from __future__ import annotations

import re

__all__ = ["reserved", "c_identifier"]

_C_KEYWORDS = """auto break case char const continue default do double else enum extern float for goto if
inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while alignas alignof bool constexpr false nullptr static_assert thread_local true typeof
typeof_unqual"""
_CPP_KEYWORDS = """and and_eq asm bitand bitor catch char8_t char16_t char32_t class co_await co_return co_yield
compl concept consteval constinit const_cast decltype delete dynamic_cast explicit export friend mutable
namespace new noexcept not not_eq operator or or_eq private protected public reinterpret_cast requires
static_cast template this throw try typeid typename using virtual wchar_t xor xor_eq"""
#: C99's <math.h> functions: each also with the suffixes f (float) and l (long double).
_MATH = """acos asin atan atan2 cos sin tan acosh asinh atanh cosh sinh tanh exp exp2 expm1 frexp ilogb ldexp
log log10 log1p log2 logb modf scalbn scalbln cbrt fabs hypot pow sqrt erf erfc lgamma tgamma ceil floor
nearbyint rint lrint llrint round lround llround trunc fmod remainder remquo copysign nan nextafter nexttoward
fdim fmax fmin fma"""
#: Lower-case macros and objects of the standard headers, gcc's predefined macros, the C library
#: functions the generated code calls, and CUDA's built-in variables and the launcher's names.
_OTHERS = """alloca offsetof stdin stdout stderr environ assert errno complex imaginary I math_errhandling
fpclassify signbit strdupa strndupa linux unix i386 main memcpy memset threadIdx blockIdx blockDim gridDim
warpSize dim3 grid block stream min max float2 float4 double2"""

_EXACT = frozenset((_C_KEYWORDS + " " + _CPP_KEYWORDS + " " + _OTHERS).split()) | frozenset(
    f"{base}{suffix}" for base in _MATH.split() for suffix in ("", "f", "l"))
_FAMILIES = re.compile("|".join([
    r"_\w*",  # reserved to the implementation (and the intrinsics, _mm256_*)
    r"u?int\w*_t|size_t|ptrdiff_t",  # types the generated code uses (a parameter may hide any other)
    r"[A-Z][A-Z0-9_]{2,}",  # macros, by convention: NAN, EOF, INT8_MAX, SEEK_SET
    r"M_[A-Z0-9_]+(f|l|f\d+x?)?",  # <math.h>'s constants: M_PI, M_PIf, M_SQRT1_2f64x
    r"L_(tmpnam|ctermid|cuserid)|P_tmpdir",
    r"is[a-z]\w*",  # <math.h>'s and <ctype.h>'s classifying macros: isnan, isfinite, isalpha
    r"\w+_unlocked",
    r"(be|le)(16|32|64)toh|hto(be|le)(16|32|64)",
    r"(tf|tunefleet)_\w*",  # the runtime's and the generated code's own
]))


def reserved(name: str) -> bool:
    """Whether `name` cannot be declared as it is in generated C, C++ or CUDA (see the module docstring)."""
    return name in _EXACT or _FAMILIES.fullmatch(name) is not None


def c_identifier(name: str) -> str:
    """`name`, or ``tf_u_<name>`` when it is :func:`reserved`. Distinct user names stay distinct."""
    return f"tf_u_{name}" if reserved(name) else name
