//===- TensorMaps.cpp - TMA tensor maps the runtime encodes at launch -----===//
//
// See TensorMaps.h. The conditions and the map layouts mirror the compiler's
// (lib/Conversion/KilnToCPU/GPUPipelining.cpp: tmaViewAllows and tmaDims):
// a change to one is a change to both.
//
//===----------------------------------------------------------------------===//

#include "TensorMaps.h"

#include "Bundle.h"
#include "Status.h"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace kiln::rt {

namespace {

constexpr size_t kMaxMaps = 32;
constexpr size_t kMaxTokens = 256;

bool parseInt(std::string_view text, int64_t &out) {
  if (text.empty())
    return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

bool isIntegerDType(kiln_dtype t) {
  switch (t) {
  case KILN_DTYPE_I1:
  case KILN_DTYPE_I8:
  case KILN_DTYPE_I16:
  case KILN_DTYPE_I32:
  case KILN_DTYPE_I64:
  case KILN_DTYPE_U8:
    return true;
  default:
    return false;
  }
}

/// Parses a postfix expression ("a10,a11,*"): tokens checked, every operator
/// with two operands, one value left. `why` says what is wrong.
bool parseExpr(std::string_view text, const Manifest &m,
               std::vector<MapToken> &out, std::string &why) {
  static const struct {
    const char *name;
    MapToken::Op op;
  } kOps[] = {{"+", MapToken::Add},     {"-", MapToken::Sub},
              {"*", MapToken::Mul},     {"sdiv", MapToken::SDiv},
              {"udiv", MapToken::UDiv}, {"srem", MapToken::SRem},
              {"urem", MapToken::URem}, {"smax", MapToken::SMax},
              {"smin", MapToken::SMin}, {"umax", MapToken::UMax},
              {"umin", MapToken::UMin}};
  out.clear();
  int depth = 0;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string_view tok = text.substr(start, comma - start);
    if (out.size() == kMaxTokens) {
      why = "more than " + std::to_string(kMaxTokens) + " tokens";
      return false;
    }
    MapToken t{MapToken::Const, 0};
    bool found = false;
    for (const auto &o : kOps)
      if (tok == o.name) {
        t.op = o.op;
        found = true;
      }
    if (found) {
      if (depth < 2) {
        why = "operator '" + std::string(tok) + "' lacks operands";
        return false;
      }
      --depth;
    } else if (tok.size() > 1 && tok[0] == 'a' && parseInt(tok.substr(1), t.value)) {
      t.op = MapToken::Arg;
      if (t.value < 0 || size_t(t.value) >= m.args.size() ||
          m.args[t.value].kind != KILN_ARG_SCALAR ||
          !isIntegerDType(m.args[t.value].dtype)) {
        why = "'" + std::string(tok) + "' is not an integer scalar argument";
        return false;
      }
      ++depth;
    } else if (parseInt(tok, t.value)) {
      ++depth;
    } else {
      why = "bad token '" + std::string(tok) + "'";
      return false;
    }
    out.push_back(t);
    if (comma == std::string_view::npos)
      break;
    start = comma + 1;
  }
  if (depth != 1) {
    why = "leaves " + std::to_string(depth) + " values, not 1";
    return false;
  }
  return true;
}

/// An integer argument's value, extended to 64 bits as its type says
/// (index_cast: signed; u8 and i1 zero-extend).
int64_t argValue(const kiln_arg &a) {
  switch (a.dtype) {
  case KILN_DTYPE_I1:
  case KILN_DTYPE_U8:
    return a.value.u8;
  case KILN_DTYPE_I8:
    return a.value.i8;
  case KILN_DTYPE_I16:
    return a.value.i16;
  case KILN_DTYPE_I32:
    return a.value.i32;
  default:
    return a.value.i64;
  }
}

/// Evaluates a checked expression with 64-bit wrapping arithmetic (the
/// kernel's arith ops). False on a division by zero or INT64_MIN / -1,
/// undefined on the device: the map is then not used.
bool evaluate(const std::vector<MapToken> &expr, const kiln_arg *args,
              int64_t &out) {
  int64_t stack[kMaxTokens];
  int n = 0;
  for (const MapToken &t : expr) {
    if (t.op == MapToken::Const) {
      stack[n++] = t.value;
      continue;
    }
    if (t.op == MapToken::Arg) {
      stack[n++] = argValue(args[t.value]);
      continue;
    }
    int64_t b = stack[--n], a = stack[--n];
    uint64_t ua = uint64_t(a), ub = uint64_t(b);
    int64_t r = 0;
    switch (t.op) {
    case MapToken::Add:
      r = int64_t(ua + ub);
      break;
    case MapToken::Sub:
      r = int64_t(ua - ub);
      break;
    case MapToken::Mul:
      r = int64_t(ua * ub);
      break;
    case MapToken::SDiv:
    case MapToken::SRem:
      if (b == 0 || (a == std::numeric_limits<int64_t>::min() && b == -1))
        return false;
      r = t.op == MapToken::SDiv ? a / b : a % b;
      break;
    case MapToken::UDiv:
    case MapToken::URem:
      if (b == 0)
        return false;
      r = int64_t(t.op == MapToken::UDiv ? ua / ub : ua % ub);
      break;
    case MapToken::SMax:
      r = a > b ? a : b;
      break;
    case MapToken::SMin:
      r = a < b ? a : b;
      break;
    case MapToken::UMax:
      r = int64_t(ua > ub ? ua : ub);
      break;
    default:
      r = int64_t(ua < ub ? ua : ub);
      break;
    }
    stack[n++] = r;
  }
  out = stack[0];
  return true;
}

} // namespace

kiln_status checkTensorMaps(Manifest &m) {
  m.tensorMaps.clear();
  if (m.tensorMapLines.size() > kMaxMaps)
    return makeStatus(KILN_ERROR_BAD_BUNDLE,
                      "bundle '%s' declares %zu tensor maps (at most %zu)",
                      m.name.c_str(), m.tensorMapLines.size(), kMaxMaps);
  for (size_t i = 0; i < m.tensorMapLines.size(); ++i) {
    std::vector<std::string_view> f;
    std::string_view line = m.tensorMapLines[i];
    for (size_t start = 0;;) {
      size_t sp = line.find(' ', start);
      f.push_back(line.substr(start, sp - start));
      if (sp == std::string_view::npos)
        break;
      start = sp + 1;
    }
    auto bad = [&](const std::string &why) {
      return makeStatus(KILN_ERROR_BAD_BUNDLE, "bundle '%s': tensor_map %zu ('%s'): %s",
                        m.name.c_str(), i, m.tensorMapLines[i].c_str(), why.c_str());
    };
    if (f.size() < 6)
      return bad("expected kind, element bytes, argument, rank, rows, columns, "
                 "sizes and strides");
    TensorMapSpec s;
    if (f[0] == "plain")
      s.kind = TensorMapSpec::Plain;
    else if (f[0] == "core")
      s.kind = TensorMapSpec::Core;
    else if (f[0] == "swizzled")
      s.kind = TensorMapSpec::Swizzled;
    else
      return bad("kind must be plain, core or swizzled");
    int64_t eb, arg, rank, rows, cols;
    if (!parseInt(f[1], eb) || (eb != 1 && eb != 2 && eb != 4 && eb != 8))
      return bad("element bytes must be 1, 2, 4 or 8");
    if (!parseInt(f[2], arg) || arg < 0 || size_t(arg) >= m.args.size() ||
        m.args[arg].kind != KILN_ARG_PTR)
      return bad("the base must be a pointer argument");
    if (!parseInt(f[3], rank) || rank < 2 || rank > 5)
      return bad("rank must be 2 to 5");
    if (!parseInt(f[4], rows) || rows < 1 || rows > 256 || !parseInt(f[5], cols) ||
        cols < 1 || cols > 256 || (s.kind == TensorMapSpec::Swizzled && cols % (128 / eb)) ||
        (s.kind == TensorMapSpec::Core && cols % 8))
      return bad("bad tile rows or columns");
    if (f.size() != size_t(6 + 2 * rank))
      return bad("expected " + std::to_string(rank) + " sizes and strides");
    s.elemBytes = uint32_t(eb);
    s.ptrArg = uint32_t(arg);
    s.rank = uint32_t(rank);
    s.rows = uint32_t(rows);
    s.cols = uint32_t(cols);
    for (int64_t d = 0; d < 2 * rank; ++d) {
      std::vector<MapToken> expr;
      std::string why;
      if (!parseExpr(f[6 + d], m, expr, why))
        return bad((d < rank ? "size " : "stride ") + std::to_string(d % rank) +
                   ": " + why);
      (d < rank ? s.sizes : s.strides).push_back(std::move(expr));
    }
    m.tensorMaps.push_back(std::move(s));
  }
  return nullptr;
}

kiln_status encodeTensorMaps(const Manifest &m, const kiln_arg *args,
                             TensorMapEncoder encode, const char *encoderName,
                             TensorMapBytes *out, uint32_t &flags) {
  flags = 0;
  const char *strictEnv = std::getenv("KILN_TENSOR_MAP_ERRORS");
  const bool strict = strictEnv && std::strcmp(strictEnv, "1") == 0;
  for (size_t i = 0; i < m.tensorMaps.size(); ++i) {
    const TensorMapSpec &s = m.tensorMaps[i];
    std::memset(out[i].bytes, 0, sizeof out[i].bytes);
    const int64_t r = s.rank, eb = s.elemBytes;
    int64_t size[5], stride[5];
    bool ok = true;
    for (int64_t d = 0; d < r && ok; ++d)
      ok = evaluate(s.sizes[d], args, size[d]) && evaluate(s.strides[d], args, stride[d]);
    // The view allows TMA (GPUPipelining.cpp, tmaViewAllows): a unit
    // innermost stride, a 16-byte aligned base, sizes in [1, 2^30], outer
    // strides positive, below 2^40 bytes and multiples of 16 bytes; core
    // maps, a column count that is a multiple of 8.
    uint64_t base = uint64_t(reinterpret_cast<uintptr_t>(args[s.ptrArg].value.ptr));
    ok = ok && stride[r - 1] == 1 && base % 16 == 0;
    for (int64_t d = 0; d < r && ok; ++d) {
      ok = size[d] >= 1 && size[d] <= (int64_t(1) << 30);
      if (ok && d + 1 < r)
        ok = stride[d] > 0 && stride[d] < (int64_t(1) << 40) / eb &&
             stride[d] * eb % 16 == 0;
    }
    if (ok && s.kind == TensorMapSpec::Core)
      ok = size[r - 1] % 8 == 0;
    if (!ok)
      continue;
    // The map's dimensions, innermost first (tmaDims).
    uint64_t dim[5], gstride[5];
    uint32_t box[5], estride[5] = {1, 1, 1, 1, 1};
    int n = 0;
    if (s.kind == TensorMapSpec::Core) {
      dim[0] = 8, box[0] = 8;
      dim[1] = uint64_t(size[r - 2]), gstride[0] = uint64_t(stride[r - 2] * eb),
      box[1] = s.rows;
      dim[2] = uint64_t(size[r - 1]) / 8, gstride[1] = 16, box[2] = s.cols / 8;
      n = 3;
    } else {
      dim[0] = uint64_t(size[r - 1]);
      // (A swizzled box is one 128-byte slab wide.)
      box[0] = s.kind == TensorMapSpec::Swizzled ? uint32_t(128 / s.elemBytes) : s.cols;
      dim[1] = uint64_t(size[r - 2]), gstride[0] = uint64_t(stride[r - 2] * eb),
      box[1] = s.rows;
      n = 2;
    }
    for (int64_t d = r - 3; d >= 0; --d, ++n) {
      if (n == 5) { // a core map of a rank-5 tile: the compiler takes cp.async
        ok = false;
        break;
      }
      dim[n] = uint64_t(size[d]), gstride[n - 1] = uint64_t(stride[d] * eb), box[n] = 1;
    }
    if (!ok)
      continue;
    // Unsigned integers of the element's size (TMA copies bits), no
    // interleave, the 128-byte swizzle or none, no L2 promotion, zero fill.
    int dataType = eb == 1 ? 0 : eb == 2 ? 1 : eb == 4 ? 2 : 4;
    int swizzle = s.kind == TensorMapSpec::Swizzled ? 3 : 0;
    // Without an encoder (a driver before CUDA 12), or where it refuses a
    // map the conditions above allowed, the kernel takes cp.async for that
    // view (its bit stays clear): slower, never wrong. KILN_TENSOR_MAP_ERRORS=1
    // makes either a launch error instead (the device check sets it).
    if (!encode) {
      if (strict)
        return makeStatus(KILN_ERROR_LAUNCH,
                          "kernel '%s': tensor map %zu needs %s, which is not "
                          "available",
                          m.name.c_str(), i, encoderName);
      continue;
    }
    if (int result = encode(out[i].bytes, dataType, uint32_t(n),
                            args[s.ptrArg].value.ptr, dim, gstride, box, estride,
                            0, swizzle, 0, 0)) {
      std::memset(out[i].bytes, 0, sizeof out[i].bytes);
      if (strict)
        return makeStatus(KILN_ERROR_LAUNCH,
                          "kernel '%s': %s refused tensor map %zu (of argument "
                          "'%s', rank %d, error %d)",
                          m.name.c_str(), encoderName, i,
                          m.args[s.ptrArg].name.c_str(), n, result);
      continue;
    }
    flags |= 1u << i;
  }
  return nullptr;
}

} // namespace kiln::rt
